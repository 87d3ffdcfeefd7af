import DopeSyncBundle
import DopeSyncSupport
import Foundation
import SQLiteSupport

/// The `bundles` and `claims` tables: each bundle's claim, attempts, outcome and last error.
extension CheckpointStore {
    // MARK: - Bundles and claims

    /// Records that `owner` claimed the bundle `name` (moved it into `processing/`), with its session
    /// id and number of steps once the bundle is validated and planned (for progress).
    ///
    /// A bundle seen for the first time gets `first_seen = now`. A row left by a bundle that finished
    /// (`done` or `failed`) under the same name belongs to another file: it is replaced by a fresh row.
    public func recordClaim(
        name: String, sessionID: String? = nil, owner: ClaimOwner, totalSteps: Int? = nil, now: Date = Date()
    ) throws(CheckpointError) {
        try write("recording the claim of \(name)") { connection in
            try Self.recordClaim(
                connection, name: name, sessionID: sessionID, owner: owner, totalSteps: totalSteps, now: now,
                firstSight: clock.firstSightStamp)
        }
    }

    /// Records the claim, as above, and binds its session to this bundle's producer and this API
    /// (``SessionBinding/decide(existing:producer:api:)``) in the same transaction: the session's
    /// steps done against this API, or the producer that owns it.
    public func recordClaim(
        name: String, sessionID: String, owner: ClaimOwner, producer: Producer, api: String, totalSteps: Int,
        now: Date = Date()
    ) throws(CheckpointError) -> SessionClaim {
        try write("recording the claim of \(name)") { connection in
            try Self.recordClaim(
                connection, name: name, sessionID: sessionID, owner: owner, totalSteps: totalSteps, now: now,
                firstSight: clock.firstSightStamp)
            if case .anotherProducer(let first) = try Self.bindSession(
                connection, sessionID, producer: producer, api: api, now: now)
            {
                return .anotherProducer(first)
            }
            return .resume(try Self.completedSteps(connection, sessionID: sessionID))
        }
    }

    private static func recordClaim(
        _ connection: SQLiteConnection, name: String, sessionID: String?, owner: ClaimOwner, totalSteps: Int?,
        now: Date, firstSight: BootInstant?
    ) throws(SQLiteError) {
        // A claim recorded with its session is a reading that ended (the bundle was validated):
        // the readings cut short before it count no more (``beginReading(name:now:)``).
        let t = now.timeIntervalSince1970
        try connection.query(
            "DELETE FROM bundles WHERE name = ? AND last_outcome IN \(BundleOutcome.finishedSQL)", [name])
        try connection.query(
            """
            INSERT INTO bundles (name, session_id, first_seen, first_seen_boot, last_outcome, updated_at, steps_total)
            VALUES (?, ?, ?, ?, 'claimed', ?, ?)
            ON CONFLICT (name) DO UPDATE SET
                session_id = COALESCE(excluded.session_id, session_id), last_outcome = 'claimed', updated_at = excluded.updated_at,
                steps_total = COALESCE(excluded.steps_total, steps_total), reading_since = NULL,
                readings_cut_short = CASE WHEN excluded.session_id IS NULL THEN readings_cut_short ELSE 0 END
            """, [name, sessionID, t, firstSight?.stored, t, totalSteps])
        try connection.query(
            "INSERT OR REPLACE INTO claims (bundle_name, run_id, host, pid, claimed_at) VALUES (?, ?, ?, ?, ?)",
            [name, owner.runID, owner.host, Int(owner.pid), t])
    }

    /// Marks the bundle `name` as being read (validated) and returns how many earlier readings of
    /// it never ended. A reading ends with the claim, a failure or a give-back, which clear the
    /// mark; a mark still set here means the process died while reading (a crash in the archive
    /// library, the OOM killer, a kill after a hang). Such a bundle must not be claimed for ever.
    public func beginReading(name: String, now: Date = Date()) throws(CheckpointError) -> Int {
        try write("recording that \(name) is being read") { connection in
            // A row left by a bundle that finished (done or failed) under the same name belongs to
            // another file.
            try connection.query(
                "DELETE FROM bundles WHERE name = ? AND last_outcome IN \(BundleOutcome.finishedSQL)", [name])
            try Self.ensureBundle(
                connection, name: name, now: now, firstSight: clock.firstSightStamp)
            let row = try connection.queryFirst(
                """
                UPDATE bundles SET readings_cut_short = readings_cut_short + (reading_since IS NOT NULL), reading_since = ?
                WHERE name = ? RETURNING readings_cut_short
                """, [now.timeIntervalSince1970, name])
            guard let row else { throw CheckpointError(code: .database, message: "bundle row \(name) vanished") }
            return try row["readings_cut_short"]
        }
    }

    /// Counts an attempt and computes the next attempt time with `policy`; ends the claim.
    ///
    /// The caller gives the bundle back with `nextAttemptAt` as its mtime, or, when the result is
    /// ``Deferral/exhausted``, moves it to `failed/` and calls ``recordFailure(name:sessionID:error:now:)``.
    public func recordDeferral(
        name: String, sessionID: String?, error: BundleFailure, now: Date = Date(),
        policy: DeferralPolicy = DeferralPolicy()
    ) throws(CheckpointError) -> Deferral {
        let (synchronized, boot) = (clock.isSynchronized(), clock.bootInstant())
        return try write("recording the deferral of \(name)") { connection in
            try Self.ensureBundle(connection, name: name, now: now, firstSight: synchronized ? nil : boot)
            guard
                let row = try connection.queryFirst(
                    "UPDATE bundles SET attempts = attempts + 1 WHERE name = ? RETURNING attempts, first_seen, first_seen_boot",
                    [name])
            else { throw CheckpointError(code: .database, message: "bundle row \(name) vanished") }
            // The first sight dated again under a synchronized clock, by the boot's clock or at now
            // (``DeferralPolicy/deferral(attempts:firstSeen:firstSeenOnBoot:now:nowOnBoot:clockIsSynchronized:)``).
            let deferral = policy.deferral(
                attempts: try row["attempts"], firstSeen: Date(timeIntervalSince1970: try row["first_seen"]),
                firstSeenOnBoot: BootInstant(stored: try row["first_seen_boot"]), now: now, nowOnBoot: boot,
                clockIsSynchronized: synchronized)
            if deferral.firstSeenDatedAgain {
                try connection.query(
                    "UPDATE bundles SET first_seen = ?, first_seen_boot = NULL WHERE name = ?",
                    [deferral.firstSeen.timeIntervalSince1970, name])
            }
            try Self.setOutcome(
                connection, name: name, sessionID: sessionID, outcome: .deferred, error: error,
                nextAttemptAt: deferral.nextAttemptAt, now: now)
            return deferral
        }
    }

    /// Records that the bundle went to `failed/` and why; ends the claim. Checkpoints are kept.
    public func recordFailure(name: String, sessionID: String?, error: BundleFailure, now: Date = Date())
        throws(CheckpointError)
    {
        try write("recording the failure of \(name)") { connection in
            try Self.ensureBundle(connection, name: name, now: now)
            try Self.setOutcome(
                connection, name: name, sessionID: sessionID, outcome: .failed, error: error, nextAttemptAt: nil,
                now: now)
        }
    }

    /// Records that the bundle went to `done/`; ends the claim. The last error is kept for history.
    public func recordDone(name: String, sessionID: String?, now: Date = Date()) throws(CheckpointError) {
        try write("recording \(name) done") { connection in
            try Self.ensureBundle(connection, name: name, now: now)
            try Self.setOutcome(
                connection, name: name, sessionID: sessionID, outcome: .done, error: nil, nextAttemptAt: nil, now: now,
                keepError: true)
        }
    }

    /// Records that the bundle was given back to `incoming/` without counting an attempt
    /// (401/403, the circuit breaker, shutdown); ends the claim.
    public func recordReturned(name: String, now: Date = Date()) throws(CheckpointError) {
        try write("recording \(name) given back") { connection in
            try Self.ensureBundle(connection, name: name, now: now)
            try connection.query(
                "UPDATE bundles SET last_outcome = 'returned', updated_at = ?, reading_since = NULL WHERE name = ?",
                [now.timeIntervalSince1970, name])
            try connection.query("DELETE FROM claims WHERE bundle_name = ?", [name])
        }
    }

    /// `requeue`: a fresh attempt count and a fresh max-age clock (`first_seen = now`, or a bundle older than
    /// the max age would fail again at once); no next-attempt time. Checkpoints are kept, so it resumes.
    /// Returns false when the database does not know the bundle (nothing to reset; requeue still works).
    @discardableResult
    public func resetAttempts(name: String, now: Date = Date()) throws(CheckpointError) -> Bool {
        try write("resetting the attempts of \(name)") { connection in
            try connection.query(
                """
                UPDATE bundles SET attempts = 0, first_seen = ?, first_seen_boot = ?, next_attempt_at = NULL,
                    last_outcome = 'requeued', updated_at = ?, reading_since = NULL, readings_cut_short = 0
                WHERE name = ?
                """,
                [
                    now.timeIntervalSince1970, clock.firstSightStamp?.stored, now.timeIntervalSince1970,
                    name,
                ])
            return connection.changes > 0
        }
    }

    /// `retry`: a deferred bundle is due now (its next attempt becomes `now`); its attempts stay.
    /// Returns false when the store holds no deferral of that name.
    @discardableResult
    public func makeDue(name: String, now: Date = Date()) throws(CheckpointError) -> Bool {
        try write("making \(name) due") { connection in
            try connection.query(
                "UPDATE bundles SET next_attempt_at = ? WHERE name = ? AND last_outcome = 'deferred'",
                [now.timeIntervalSince1970, name])
            return connection.changes > 0
        }
    }

    /// `prune`: forgets bundles deleted from `done/`. Deletes their rows and claims, and the steps of their
    /// sessions when no bundle row still names that session. Only rows whose last outcome is `done` are
    /// deleted: a row reused by a newer bundle with the same name (claimed, deferred, failed) is kept.
    ///
    /// Returns how many bundle rows were deleted.
    @discardableResult
    public func forget(names: [String]) throws(CheckpointError) -> Int {
        guard !names.isEmpty else { return 0 }
        return try write("forgetting \(names.count) bundles") { connection in
            var deleted = 0
            var sessions: Set<String> = []
            for name in names {
                guard
                    let row = try connection.queryFirst(
                        "DELETE FROM bundles WHERE name = ? AND last_outcome = 'done' RETURNING session_id", [name])
                else { continue }
                deleted += 1
                if let session: String = try row["session_id"] { sessions.insert(session) }
                try connection.query("DELETE FROM claims WHERE bundle_name = ?", [name])
            }
            for session in sessions {
                try connection.query(
                    """
                    DELETE FROM steps WHERE session_id = ?1 AND NOT EXISTS (SELECT 1 FROM bundles WHERE session_id = ?1)
                    """, [session])
            }
            return deleted
        }
    }

    /// A move had to give the bundle another name (a suffix): its row, claim and steps follow it.
    /// A finished row under the new name (a file no longer there, or in another folder) is
    /// replaced. Into `done/` or `failed/` (`keepingALiveRow`), a live one is another bundle's
    /// (rows are by name, and `incoming/a.1.tar.gz`, waiting for retry, is not
    /// `done/a.1.tar.gz`): its attempts and claim stay, and this finished row keeps its old
    /// name. Back into `incoming/`, the bundle takes the name's row: left under its old name, its
    /// attempts would pass to the new file that took that name.
    public func renamed(from oldName: String, to newName: String, keepingALiveRow: Bool, now: Date = Date())
        throws(CheckpointError)
    {
        guard oldName != newName else { return }
        try write("renaming \(oldName) to \(newName)") { connection in
            let live = try connection.queryFirst(
                "SELECT 1 AS one FROM bundles WHERE name = ? AND last_outcome NOT IN \(BundleOutcome.finishedSQL)",
                [newName])
            guard live == nil || !keepingALiveRow else { return }
            if try connection.queryFirst("SELECT 1 FROM bundles WHERE name = ?", [oldName]) != nil {
                try connection.query("DELETE FROM bundles WHERE name = ?", [newName])
                try connection.query(
                    "UPDATE bundles SET name = ?, updated_at = ? WHERE name = ?",
                    [newName, now.timeIntervalSince1970, oldName])
            }
            try connection.query(
                "DELETE FROM claims WHERE bundle_name = ? AND EXISTS (SELECT 1 FROM claims WHERE bundle_name = ?)",
                [newName, oldName])
            try connection.query("UPDATE claims SET bundle_name = ? WHERE bundle_name = ?", [newName, oldName])
            try connection.query("UPDATE steps SET bundle_name = ? WHERE bundle_name = ?", [newName, oldName])
        }
    }

    /// The retry bookkeeping of one bundle, if known.
    public func bundleState(name: String) throws(CheckpointError) -> BundleState? {
        try read("reading bundle \(name)") { connection in
            try connection.queryFirst("\(Self.bundleColumns(countingStepsDone: true)) WHERE name = ?", [name]).map {
                try Self.bundleState($0)
            }
        }
    }

    /// Bundles whose session is on the server but incomplete (``HalfSession``), oldest first.
    public func halfSessions() throws(CheckpointError) -> [HalfSession] {
        try read("reading half sessions") { connection in
            var sessions: [HalfSession] = []
            try connection.forEachRow(HalfSession.selectSQL(schema: "")) { row throws(SQLiteError) in
                sessions.append(
                    HalfSession(
                        name: try row["name"], sessionID: try row["session_id"], records: try row["records"],
                        stepsTotal: try row["steps_total"], since: try row["since"]))
            }
            return sessions
        }
    }

    /// Every bundle row, or those whose last outcome is `outcome` (for `status`: one query, fast with 100,000 rows).
    public func bundles(withOutcome outcome: BundleOutcome? = nil) throws(CheckpointError) -> [BundleState] {
        try read("reading bundles") { connection in
            var states: [BundleState] = []
            if let outcome {
                try connection.forEachRow(
                    "\(Self.bundleColumns()) WHERE last_outcome = ? ORDER BY name", [outcome.rawValue]
                ) { row throws(SQLiteError) in states.append(try Self.bundleState(row)) }
            } else {
                try connection.forEachRow("\(Self.bundleColumns()) ORDER BY name") { row throws(SQLiteError) in
                    states.append(try Self.bundleState(row))
                }
            }
            return states
        }
    }

    /// The rows of bundles not done or failed (claimed, deferred, given back, requeued), by name:
    /// what ``IncomingQueue`` needs to know of `incoming/`. Small whatever the history.
    public func bundlesInFlight() throws(CheckpointError) -> [String: BundleState] {
        try read("reading bundles in flight") { connection in
            var states: [String: BundleState] = [:]
            try connection.forEachRow(
                "\(Self.bundleColumns()) WHERE last_outcome IS NULL OR last_outcome NOT IN ('done', 'failed')"
            ) { row throws(SQLiteError) in
                let state = try Self.bundleState(row)
                states[state.name] = state
            }
            return states
        }
    }

    /// `prune`: done times after `latest` become `now` (``CheckpointLedger/restampDoneTimes(after:to:)``).
    public func restampDoneTimes(after latest: Date, to now: Date) throws(CheckpointError) -> Int {
        try write("recording done times ahead of the clock as now") { connection in
            try connection.query(
                "UPDATE bundles SET updated_at = ? WHERE last_outcome = 'done' AND updated_at > ?",
                [now.timeIntervalSince1970, latest.timeIntervalSince1970])
            return connection.changes
        }
    }

    /// When each bundle in done/ was recorded done, by name: the clock `prune` goes by.
    public func doneTimes() throws(CheckpointError) -> [String: Date] {
        try read("reading done times") { connection in
            var times: [String: Date] = [:]
            try connection.forEachRow("SELECT name, updated_at FROM bundles WHERE last_outcome = 'done'") {
                row throws(SQLiteError) in
                times[try row["name"]] = Date(timeIntervalSince1970: try row["updated_at"])
            }
            return times
        }
    }

    /// Claims recorded and not yet ended, oldest first. A claim of a run that died stays until the bundle
    /// is taken back; `status` can compare with `processing/`.
    public func claims() throws(CheckpointError) -> [ClaimRecord] {
        try read("reading claims") { connection in
            try connection.query(
                "SELECT bundle_name, run_id, host, pid, claimed_at FROM claims ORDER BY claimed_at, bundle_name"
            ).map { row in
                ClaimRecord(
                    bundleName: try row["bundle_name"],
                    owner: ClaimOwner(host: try row["host"], pid: try row["pid"], runID: try row["run_id"]),
                    claimedAt: Date(timeIntervalSince1970: try row["claimed_at"]))
            }
        }
    }

    // MARK: - Helpers of the bundles table

    /// The bundle's row, made if missing; `firstSight` is the stamp of a first sight
    /// (``ClockFacts/firstSightStamp``) where a deferral may date it again.
    static func ensureBundle(
        _ connection: SQLiteConnection, name: String, now: Date, firstSight: BootInstant? = nil
    ) throws(SQLiteError) {
        try connection.query(
            "INSERT OR IGNORE INTO bundles (name, first_seen, first_seen_boot, updated_at) VALUES (?, ?, ?, ?)",
            [name, now.timeIntervalSince1970, firstSight?.stored, now.timeIntervalSince1970])
    }

    static func setOutcome(
        _ connection: SQLiteConnection, name: String, sessionID: String?, outcome: BundleOutcome,
        error: BundleFailure?, nextAttemptAt: Date?, now: Date, keepError: Bool = false
    ) throws(SQLiteError) {
        if keepError {
            try connection.query(
                """
                UPDATE bundles SET session_id = COALESCE(?, session_id), last_outcome = ?, next_attempt_at = ?, updated_at = ?, reading_since = NULL
                WHERE name = ?
                """,
                [sessionID, outcome.rawValue, nextAttemptAt?.timeIntervalSince1970, now.timeIntervalSince1970, name])
        } else {
            try connection.query(
                """
                UPDATE bundles SET session_id = COALESCE(?, session_id), last_outcome = ?, next_attempt_at = ?, updated_at = ?,
                    reading_since = NULL, last_error_reason = ?, last_error_step = ?, last_error_http_status = ?, last_error_message = ?,
                    last_error_field = ?
                WHERE name = ?
                """,
                [
                    sessionID, outcome.rawValue, nextAttemptAt?.timeIntervalSince1970, now.timeIntervalSince1970,
                    error?.reason.rawValue, error?.step, error?.httpStatus, error?.message, error?.field, name,
                ])
        }
        try connection.query("DELETE FROM claims WHERE bundle_name = ?", [name])
    }

    /// Bundles' rows (``BundleState/selectSQL(schema:countingStepsDone:)``).
    static func bundleColumns(countingStepsDone: Bool = false) -> String {
        BundleState.selectSQL(schema: "", countingStepsDone: countingStepsDone)
    }

    static func bundleState(_ row: SQLiteRow) throws(SQLiteError) -> BundleState {
        var error: BundleFailure? = nil
        if let reason: String = try row["last_error_reason"] {
            error = BundleFailure(
                reason: FailureReason(rawValue: reason), step: try row["last_error_step"],
                httpStatus: try row["last_error_http_status"], field: try row["last_error_field"],
                message: try row["last_error_message"])
        }
        return BundleState(
            name: try row["name"], sessionID: try row["session_id"], attempts: try row["attempts"],
            firstSeen: Date(timeIntervalSince1970: try row["first_seen"]),
            firstSeenOnBoot: BootInstant(stored: try row["first_seen_boot"]),
            nextAttemptAt: (try row["next_attempt_at"] as Double?).map(Date.init(timeIntervalSince1970:)),
            lastError: error,
            lastOutcome: (try row["last_outcome"] as String?).map(BundleOutcome.init(rawValue:)),
            updatedAt: Date(timeIntervalSince1970: try row["updated_at"]), stepsDone: try row["steps_done"],
            stepsTotal: try row["steps_total"])
    }
}
