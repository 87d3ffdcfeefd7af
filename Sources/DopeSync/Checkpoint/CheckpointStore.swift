import Foundation
import SQLiteSupport

/// The checkpoint database: which upload steps are done (with their server ids), the retry
/// bookkeeping of each bundle, claims in progress, and the runs.
///
/// Promises:
/// - Every method that changes something is one `BEGIN IMMEDIATE` transaction: it all commits or none of it.
/// - Several processes may use one database at once. Write transactions are serialised across processes
///   by `flock(2)` on a lock file beside the database, which closes the window of SQLite 3.40's WAL-reset
///   bug (two processes writing or checkpointing at the same instant can corrupt the WAL index; fixed in
///   3.44). Readers are not blocked (WAL).
/// - `synchronous = NORMAL`: a commit is durable once the WAL is synced at checkpoint, so a power loss can
///   lose the last few commits but never corrupts the file. Losing a step's result is harmless: the step is
///   sent again with the same deterministic `Idempotency-Key` and byte-identical body, and a server that
///   honours keys replays its first answer. FULL measured ~300 commits/s on these disks, NORMAL ~37,000.
/// - Methods block the calling thread for the length of one short transaction (or the busy timeout).
public final class CheckpointStore: Sendable {
    /// The database file.
    public let path: String
    /// The file locked around every write transaction.
    public let lockPath: String
    private let database: SQLiteDatabase

    /// Opens (creating if needed) the database at `path` and applies missing migrations.
    ///
    /// - Parameters:
    ///   - lockPath: the write-lock file; `path + ".lock"` when nil.
    ///   - busyTimeoutMilliseconds: how long a statement waits for another process before ``CheckpointError/Code/busy``.
    public init(path: String, lockPath: String? = nil, busyTimeoutMilliseconds: Int32 = 10_000, now: Date = Date())
        throws(CheckpointError)
    {
        self.path = path
        self.lockPath = lockPath ?? path + ".lock"
        var options = SQLiteOptions()
        options.walJournal = true
        options.synchronous = .normal
        options.busyTimeoutMilliseconds = busyTimeoutMilliseconds
        options.writeLockPath = self.lockPath
        // A run commits once per upload step with the same few statements: parsing them every
        // time cost more than running them.
        options.reusesPreparedStatements = true
        do {
            database = try SQLiteDatabase(path: path, options: options)
        } catch {
            if error.code.primary == .cantOpen {
                throw CheckpointError(
                    code: .cannotOpen,
                    message: "cannot open the checkpoint database \(path) (does its folder exist and is it writable?)",
                    cause: error)
            }
            throw CheckpointError.from(error, path: path, doing: "opening")
        }
        try Self.perform(path: path, doing: "migrating") {
            try CheckpointMigrator.migrate(database, migrations: checkpointMigrations, now: now.timeIntervalSince1970)
        }
    }

    /// Opens the spool's database (`SPOOL/dopesync.sqlite`, lock `SPOOL/dopesync.sqlite.lock`).
    public convenience init(spool: Spool, busyTimeoutMilliseconds: Int32 = 10_000, now: Date = Date())
        throws(CheckpointError)
    {
        try self.init(
            path: spool.databasePath, lockPath: spool.databaseLockPath,
            busyTimeoutMilliseconds: busyTimeoutMilliseconds, now: now)
    }

    /// The names of the migrations applied to this database, in the order they were applied.
    public func appliedMigrations() throws(CheckpointError) -> [String] {
        try read("reading migrations") { connection in
            // In the order they were applied. Not by `applied_at`: that is the opener's clock when it
            // started, and of two processes opening at once the later-started one may apply first.
            try connection.query("SELECT name FROM schema_migrations ORDER BY rowid").compactMap { $0.string(0) }
        }
    }

    // MARK: - Steps

    /// Records that a step is about to be sent. Call it before sending, every time.
    ///
    /// - A new step is stored as `sent` with its key, fingerprint and digest.
    /// - A `sent` step (a previous try got no answer) gets the new fingerprint, digest, bundle and time;
    ///   the previous fingerprint is returned so a changed request can be noticed.
    /// - A `done` step is left untouched and ``StepIntentOutcome/alreadyDone(_:)`` says so: the caller must
    ///   not send it. This is a no-op rather than an error because another bundle of the same session, in
    ///   another run, may have completed it since the plan was made.
    @discardableResult
    public func recordIntent(
        sessionID: String, stepKey: String, idempotencyKey: String, requestFingerprint: String,
        contentDigest: String, bundleName: String, now: Date = Date()
    ) throws(CheckpointError) -> StepIntentOutcome {
        let intent = StepIntent(
            stepKey: stepKey, idempotencyKey: idempotencyKey, requestFingerprint: requestFingerprint,
            contentDigest: contentDigest, bundleName: bundleName)
        return try recordIntents(sessionID: sessionID, [intent], now: now)[0]
    }

    private static func recordIntent(_ connection: SQLiteConnection, sessionID: String, _ intent: StepIntent, now: Date)
        throws -> StepIntentOutcome
    {
        let stepKey = intent.stepKey
        let existing = try connection.queryFirst(
            "SELECT state, server_id, content_digest, done_at, request_fingerprint FROM steps WHERE session_id = ? AND step_key = ?",
            [sessionID, stepKey])
        if let existing {
            if existing.string(0) == StepRecord.State.done.rawValue {
                return .alreadyDone(
                    CompletedStep(
                        serverID: Int64(existing.int(1) ?? 0), contentDigest: existing.string(2) ?? "",
                        doneAt: Date(timeIntervalSince1970: existing.double(3) ?? 0)))
            }
            try connection.query(
                """
                UPDATE steps SET idempotency_key = ?, request_fingerprint = ?, content_digest = ?, sent_at = ?, bundle_name = ?
                WHERE session_id = ? AND step_key = ?
                """,
                [
                    intent.idempotencyKey, intent.requestFingerprint, intent.contentDigest, now.timeIntervalSince1970,
                    intent.bundleName,
                    sessionID, stepKey,
                ])
            return .resent(previousFingerprint: existing.string(4) ?? "")
        }
        try connection.query(
            """
            INSERT INTO steps (session_id, step_key, idempotency_key, request_fingerprint, content_digest, state, sent_at, bundle_name)
            VALUES (?, ?, ?, ?, ?, 'sent', ?, ?)
            """,
            [
                sessionID, stepKey, intent.idempotencyKey, intent.requestFingerprint, intent.contentDigest,
                now.timeIntervalSince1970,
                intent.bundleName,
            ])
        return .recorded
    }

    /// The intent of a step about to be sent, for ``recordIntents(sessionID:_:now:)``.
    public struct StepIntent: Sendable, Equatable {
        public var stepKey: String
        public var idempotencyKey: String
        public var requestFingerprint: String
        public var contentDigest: String
        public var bundleName: String
        public init(
            stepKey: String, idempotencyKey: String, requestFingerprint: String, contentDigest: String,
            bundleName: String
        ) {
            self.stepKey = stepKey
            self.idempotencyKey = idempotencyKey
            self.requestFingerprint = requestFingerprint
            self.contentDigest = contentDigest
            self.bundleName = bundleName
        }
    }

    /// The intents of several steps about to be sent one after another, in ONE transaction: the
    /// uploader records them ahead so that a step's result can commit while the next step is
    /// already on the wire (its intent committed before it was sent, as always). Each intent is
    /// recorded as by ``recordIntent(sessionID:stepKey:idempotencyKey:requestFingerprint:contentDigest:bundleName:now:)``.
    @discardableResult
    public func recordIntents(sessionID: String, _ intents: [StepIntent], now: Date = Date()) throws(CheckpointError)
        -> [StepIntentOutcome]
    {
        try write("recording the intent of \(intents.map(\.stepKey).joined(separator: ", "))") { connection in
            try intents.map { try Self.recordIntent(connection, sessionID: sessionID, $0, now: now) }
        }
    }

    /// Records a step's server id, in one transaction with what follows from it: the step becomes `done`,
    /// and the bundle that sent it counts one more step done.
    ///
    /// Recording the same server id again is a no-op. A different id for a step already done throws
    /// ``CheckpointError/Code/conflictingResult``: the record may now exist twice on the server and a person
    /// must look. A step with no intent throws ``CheckpointError/Code/noIntent`` (a bug in the caller).
    @discardableResult
    public func recordResult(sessionID: String, stepKey: String, serverID: Int64, now: Date = Date())
        throws(CheckpointError) -> CompletedStep
    {
        try recordResults([StepResult(sessionID: sessionID, stepKey: stepKey, serverID: serverID)], now: now)[0].get()
    }

    /// A step's server id, for ``recordResults(_:now:)``.
    public struct StepResult: Sendable, Equatable {
        public var sessionID: String
        public var stepKey: String
        public var serverID: Int64
        public init(sessionID: String, stepKey: String, serverID: Int64) {
            self.sessionID = sessionID
            self.stepKey = stepKey
            self.serverID = serverID
        }
    }

    /// Records several steps' results, of any sessions, in ONE transaction: the run's group commit
    /// (``GroupCommit``) lets the results of all the bundles in flight share a commit.
    ///
    /// Each is recorded as by ``recordResult(sessionID:stepKey:serverID:now:)``, and each gets its own
    /// outcome: one that cannot be recorded (``CheckpointError/Code/conflictingResult``,
    /// ``CheckpointError/Code/noIntent``) changes nothing and does not stop the others. A failure of the
    /// database itself throws, and then none is recorded.
    public func recordResults(_ results: [StepResult], now: Date = Date()) throws(CheckpointError) -> [Result<
        CompletedStep, CheckpointError
    >] {
        try write(
            "recording the result of step \(results.map { "\($0.stepKey) of session \($0.sessionID)" }.joined(separator: ", "))"
        ) { connection in
            try results.map { result in
                do {
                    return .success(
                        try Self.recordResult(
                            connection, sessionID: result.sessionID, stepKey: result.stepKey, serverID: result.serverID,
                            now: now))
                } catch let refused as CheckpointError {
                    // Refused before it wrote anything (the checks come first): the others go on.
                    return .failure(refused)
                }
            }
        }
    }

    private static func recordResult(
        _ connection: SQLiteConnection, sessionID: String, stepKey: String, serverID: Int64, now: Date
    ) throws -> CompletedStep {
        guard
            let row = try connection.queryFirst(
                "SELECT state, server_id, content_digest, done_at, bundle_name FROM steps WHERE session_id = ? AND step_key = ?",
                [sessionID, stepKey])
        else {
            throw CheckpointError(
                code: .noIntent, message: "step \(stepKey) of session \(sessionID) has no recorded intent")
        }
        let digest = row.string(2) ?? ""
        if row.string(0) == StepRecord.State.done.rawValue {
            let known = Int64(row.int(1) ?? 0)
            guard known == serverID else {
                throw CheckpointError(
                    code: .conflictingResult,
                    message:
                        "step \(stepKey) of session \(sessionID) was done with server id \(known), now reported as \(serverID): the record may exist twice on the server"
                )
            }
            return CompletedStep(
                serverID: known, contentDigest: digest, doneAt: Date(timeIntervalSince1970: row.double(3) ?? 0))
        }
        try connection.query(
            "UPDATE steps SET state = 'done', server_id = ?, done_at = ? WHERE session_id = ? AND step_key = ?",
            [serverID, now.timeIntervalSince1970, sessionID, stepKey])
        if let bundleName = row.string(4) {
            // The session id is the claim's (recordClaim, once the bundle is validated), not repeated per step.
            try connection.query(
                "UPDATE bundles SET steps_done = steps_done + 1, updated_at = ? WHERE name = ?",
                [now.timeIntervalSince1970, bundleName])
        }
        return CompletedStep(serverID: serverID, contentDigest: digest, doneAt: now)
    }

    /// Records steps found on the server though they had no result here (a lost database,
    /// progress made elsewhere, a crash before the answer was recorded): each step's intent and
    /// its server id, all in one transaction. Returns each step as now done.
    public func recordFoundOnServer(
        sessionID: String, _ found: [(intent: StepIntent, serverID: Int64)], now: Date = Date()
    ) throws(CheckpointError) -> [CompletedStep] {
        try write("recording \(found.count) steps found on the server for session \(sessionID)") { connection in
            try found.map { entry in
                if case .alreadyDone(let done) = try Self.recordIntent(
                    connection, sessionID: sessionID, entry.intent, now: now)
                {
                    guard done.serverID == entry.serverID else {
                        throw CheckpointError(
                            code: .conflictingResult,
                            message:
                                "step \(entry.intent.stepKey) of session \(sessionID) was done with server id \(done.serverID), found on the server as \(entry.serverID): the record may exist twice on the server"
                        )
                    }
                    return done
                }
                return try Self.recordResult(
                    connection, sessionID: sessionID, stepKey: entry.intent.stepKey, serverID: entry.serverID, now: now)
            }
        }
    }

    /// The steps of a session that are done, by step key: the planner skips these, and compares each
    /// content digest with the bundle's to detect `changed_after_upload`.
    public func completedSteps(sessionID: String) throws(CheckpointError) -> [String: CompletedStep] {
        try read("reading the steps of session \(sessionID)") { connection in
            var steps: [String: CompletedStep] = [:]
            try connection.forEachRow(
                "SELECT step_key, server_id, content_digest, done_at FROM steps WHERE session_id = ? AND state = 'done'",
                [sessionID]
            ) { row in
                guard let key = row.string(0) else { return }
                steps[key] = CompletedStep(
                    serverID: Int64(row.int(1) ?? 0), contentDigest: row.string(2) ?? "",
                    doneAt: Date(timeIntervalSince1970: row.double(3) ?? 0))
            }
            return steps
        }
    }

    /// Every step the database knows for a session, sent or done, in the order they were first sent
    /// (for `dopesync inspect`).
    public func steps(sessionID: String) throws(CheckpointError) -> [StepRecord] {
        try read("reading the steps of session \(sessionID)") { connection in
            try connection.query(
                """
                SELECT session_id, step_key, idempotency_key, request_fingerprint, content_digest, state, server_id, sent_at, done_at, bundle_name
                FROM steps WHERE session_id = ? ORDER BY rowid
                """, [sessionID]
            ).map { row in
                StepRecord(
                    sessionID: row.string(0) ?? "", stepKey: row.string(1) ?? "", idempotencyKey: row.string(2) ?? "",
                    requestFingerprint: row.string(3) ?? "", contentDigest: row.string(4) ?? "",
                    state: StepRecord.State(rawValue: row.string(5) ?? "") ?? .sent,
                    serverID: row.int(6).map(Int64.init), sentAt: Date(timeIntervalSince1970: row.double(7) ?? 0),
                    doneAt: row.double(8).map(Date.init(timeIntervalSince1970:)), bundleName: row.string(9))
            }
        }
    }

    // MARK: - Bundles and claims

    /// Records that `owner` claimed the bundle `name` (moved it into `processing/`), with its session
    /// id and number of steps once the bundle is validated and planned (for progress).
    ///
    /// A bundle seen for the first time gets `first_seen = now`. A row left by a bundle that finished
    /// (`done`) under the same name belongs to another file: it is replaced by a fresh row.
    public func recordClaim(
        name: String, sessionID: String? = nil, owner: ClaimOwner, totalSteps: Int? = nil, now: Date = Date()
    ) throws(CheckpointError) {
        try write("recording the claim of \(name)") { connection in
            let t = now.timeIntervalSince1970
            try connection.query("DELETE FROM bundles WHERE name = ? AND last_outcome = 'done'", [name])
            try connection.query(
                """
                INSERT INTO bundles (name, session_id, first_seen, last_outcome, updated_at, steps_total) VALUES (?, ?, ?, 'claimed', ?, ?)
                ON CONFLICT (name) DO UPDATE SET
                    session_id = COALESCE(excluded.session_id, session_id), last_outcome = 'claimed', updated_at = excluded.updated_at,
                    steps_total = COALESCE(excluded.steps_total, steps_total), reading_since = NULL
                """, [name, sessionID, t, t, totalSteps])
            try connection.query(
                "INSERT OR REPLACE INTO claims (bundle_name, run_id, host, pid, claimed_at) VALUES (?, ?, ?, ?, ?)",
                [name, owner.runID, owner.host, Int(owner.pid), t])
        }
    }

    /// Marks the bundle `name` as being read (validated) and returns how many earlier readings of
    /// it never ended. A reading ends with the claim, a failure or a give-back, which clear the
    /// mark; a mark still set here means the process died while reading (a crash in the archive
    /// library, the OOM killer, a kill after a hang). Such a bundle must not be claimed for ever.
    public func beginReading(name: String, now: Date = Date()) throws(CheckpointError) -> Int {
        try write("recording that \(name) is being read") { connection in
            // A row left by a bundle that finished under the same name belongs to another file.
            try connection.query("DELETE FROM bundles WHERE name = ? AND last_outcome = 'done'", [name])
            try Self.ensureBundle(connection, name: name, now: now)
            let row = try connection.queryFirst(
                """
                UPDATE bundles SET readings_cut_short = readings_cut_short + (reading_since IS NOT NULL), reading_since = ?
                WHERE name = ? RETURNING readings_cut_short
                """, [now.timeIntervalSince1970, name])
            guard let cutShort = row?.int(0) else {
                throw CheckpointError(code: .database, message: "bundle row \(name) has no readings_cut_short")
            }
            return cutShort
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
        try write("recording the deferral of \(name)") { connection in
            try Self.ensureBundle(connection, name: name, now: now)
            guard
                let row = try connection.queryFirst(
                    "UPDATE bundles SET attempts = attempts + 1 WHERE name = ? RETURNING attempts, first_seen", [name])
            else { throw CheckpointError(code: .database, message: "bundle row \(name) vanished") }
            let attempts = row.int(0) ?? 1
            let firstSeen = Date(timeIntervalSince1970: row.double(1) ?? now.timeIntervalSince1970)
            let next = policy.nextAttempt(afterAttempt: attempts, now: now)
            try Self.setOutcome(
                connection, name: name, sessionID: sessionID, outcome: .deferred, error: error, nextAttemptAt: next,
                now: now)
            return Deferral(
                attempts: attempts, nextAttemptAt: next, firstSeen: firstSeen,
                exhausted: policy.isExhausted(attempts: attempts, firstSeen: firstSeen, now: now))
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
                UPDATE bundles SET attempts = 0, first_seen = ?, next_attempt_at = NULL, last_outcome = 'requeued', updated_at = ?,
                    reading_since = NULL, readings_cut_short = 0
                WHERE name = ?
                """, [now.timeIntervalSince1970, now.timeIntervalSince1970, name])
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
                if let session = row.string(0) { sessions.insert(session) }
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
    /// A stale row under the new name (a file no longer there) is replaced.
    public func renamed(from oldName: String, to newName: String, now: Date = Date()) throws(CheckpointError) {
        guard oldName != newName else { return }
        try write("renaming \(oldName) to \(newName)") { connection in
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
            try connection.queryFirst("\(Self.bundleColumns) WHERE name = ?", [name]).map(Self.bundleState)
        }
    }

    /// Every bundle row, or those whose last outcome is `outcome` (for `status`: one query, fast with 100,000 rows).
    public func bundles(withOutcome outcome: BundleOutcome? = nil) throws(CheckpointError) -> [BundleState] {
        try read("reading bundles") { connection in
            var states: [BundleState] = []
            if let outcome {
                try connection.forEachRow(
                    "\(Self.bundleColumns) WHERE last_outcome = ? ORDER BY name", [outcome.rawValue]
                ) { states.append(Self.bundleState($0)) }
            } else {
                try connection.forEachRow("\(Self.bundleColumns) ORDER BY name") { states.append(Self.bundleState($0)) }
            }
            return states
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
                    bundleName: row.string(0) ?? "",
                    owner: ClaimOwner(
                        host: row.string(2) ?? "", pid: Int32(row.int(3) ?? 0), runID: row.string(1) ?? ""),
                    claimedAt: Date(timeIntervalSince1970: row.double(4) ?? 0))
            }
        }
    }

    // MARK: - Runs

    public func recordRunStarted(runID: String, host: String, pid: Int32, startedAt: Date = Date())
        throws(CheckpointError)
    {
        try write("recording run \(runID)") { connection in
            try connection.query(
                "INSERT OR REPLACE INTO runs (run_id, host, pid, started_at) VALUES (?, ?, ?, ?)",
                [runID, host, Int(pid), startedAt.timeIntervalSince1970])
        }
    }

    /// Records the run's summary. `healthy`: whether the run shows the API working (it ended 0 or 1,
    /// deferred nothing, and either claimed something or found nothing waiting for retry); nil
    /// when it was not judged (no metrics file asked for).
    public func recordRunFinished(
        runID: String, summary: RunSummary, healthy: Bool? = nil, apiLookups: Bool? = nil, finishedAt: Date = Date()
    ) throws(CheckpointError) {
        try write("recording the end of run \(runID)") { connection in
            try connection.query(
                """
                UPDATE runs SET finished_at = ?, claimed = ?, done = ?, deferred = ?, failed = ?, requests = ?, bytes = ?, seconds = ?, exit_code = ?,
                    healthy = ?, api_lookups = ?
                WHERE run_id = ?
                """,
                [
                    finishedAt.timeIntervalSince1970, summary.claimed, summary.done, summary.deferred, summary.failed,
                    summary.requests, summary.bytes, summary.seconds, Int(summary.exitCode), healthy, apiLookups, runID,
                ])
            if connection.changes == 0 {
                throw CheckpointError(code: .database, message: "run \(runID) was never recorded as started")
            }
        }
    }

    /// The most recently started run (it may still be going on, or have died: then `finishedAt` is nil).
    public func lastRun() throws(CheckpointError) -> RunRecord? {
        try lastRun(finishedOnly: false)
    }

    /// The most recently started run that finished: the last summary line.
    public func lastFinishedRun() throws(CheckpointError) -> RunRecord? {
        try lastRun(finishedOnly: true)
    }

    /// When a run judged healthy last finished (see `recordRunFinished`).
    public func lastHealthyRunFinishedAt() throws(CheckpointError) -> Date? {
        try read("reading the last healthy run") { connection in
            try connection.queryFirst("SELECT max(finished_at) FROM runs WHERE finished_at IS NOT NULL AND healthy = 1")
                .flatMap { $0.double(0) }.map(Date.init(timeIntervalSince1970:))
        }
    }

    private func lastRun(finishedOnly: Bool) throws(CheckpointError) -> RunRecord? {
        try read("reading the last run") { connection in
            let filter = finishedOnly ? "WHERE finished_at IS NOT NULL" : ""
            return try connection.queryFirst(
                """
                SELECT run_id, host, pid, started_at, finished_at, claimed, done, deferred, failed, requests, bytes, seconds, exit_code,
                       api_lookups
                FROM runs \(filter) ORDER BY started_at DESC, rowid DESC LIMIT 1
                """
            ).map { row in
                let finishedAt = row.double(4).map(Date.init(timeIntervalSince1970:))
                let summary = finishedAt.map { _ in
                    RunSummary(
                        claimed: row.int(5) ?? 0, done: row.int(6) ?? 0, deferred: row.int(7) ?? 0,
                        failed: row.int(8) ?? 0,
                        requests: row.int(9) ?? 0, bytes: Int64(row.int(10) ?? 0), seconds: row.double(11) ?? 0,
                        exitCode: Int32(row.int(12) ?? 0))
                }
                return RunRecord(
                    runID: row.string(0) ?? "", host: row.string(1) ?? "", pid: Int32(row.int(2) ?? 0),
                    startedAt: Date(timeIntervalSince1970: row.double(3) ?? 0), finishedAt: finishedAt,
                    summary: summary,
                    apiLookups: row.int(13).map { $0 != 0 })
            }
        }
    }

    // MARK: - Helpers

    private static func ensureBundle(_ connection: SQLiteConnection, name: String, now: Date) throws(SQLiteError) {
        try connection.query(
            "INSERT OR IGNORE INTO bundles (name, first_seen, updated_at) VALUES (?, ?, ?)",
            [name, now.timeIntervalSince1970, now.timeIntervalSince1970])
    }

    private static func setOutcome(
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
                    reading_since = NULL, last_error_reason = ?, last_error_step = ?, last_error_http_status = ?, last_error_message = ?
                WHERE name = ?
                """,
                [
                    sessionID, outcome.rawValue, nextAttemptAt?.timeIntervalSince1970, now.timeIntervalSince1970,
                    error?.reason.rawValue, error?.step, error?.httpStatus, error?.message, name,
                ])
        }
        try connection.query("DELETE FROM claims WHERE bundle_name = ?", [name])
    }

    private static let bundleColumns = """
        SELECT name, session_id, attempts, first_seen, next_attempt_at, last_error_reason, last_error_step,
               last_error_http_status, last_error_message, last_outcome, updated_at, steps_done, steps_total
        FROM bundles
        """

    private static func bundleState(_ row: SQLiteRow) -> BundleState {
        let error = row.string(5).map { reason in
            BundleFailure(
                reason: FailureReason(rawValue: reason), step: row.string(6), httpStatus: row.int(7),
                message: row.string(8))
        }
        return BundleState(
            name: row.string(0) ?? "", sessionID: row.string(1), attempts: row.int(2) ?? 0,
            firstSeen: Date(timeIntervalSince1970: row.double(3) ?? 0),
            nextAttemptAt: row.double(4).map(Date.init(timeIntervalSince1970:)), lastError: error,
            lastOutcome: row.string(9).map(BundleOutcome.init(rawValue:)),
            updatedAt: Date(timeIntervalSince1970: row.double(10) ?? 0), stepsDone: row.int(11) ?? 0,
            stepsTotal: row.int(12))
    }

    // `doing` is only needed for an error message: an autoclosure, so a step's commit builds no string.
    private func read<T>(_ doing: @autoclosure () -> String, _ body: (SQLiteConnection) throws -> T)
        throws(CheckpointError) -> T
    {
        try Self.perform(path: path, doing: doing()) { try database.read(body) }
    }

    @discardableResult
    private func write<T>(_ doing: @autoclosure () -> String, _ body: (SQLiteConnection) throws -> T)
        throws(CheckpointError) -> T
    {
        try Self.perform(path: path, doing: doing()) { try database.write(body) }
    }

    /// Runs `body` and gives every failure a ``CheckpointError`` code.
    private static func perform<T>(path: String, doing: @autoclosure () -> String, _ body: () throws -> T)
        throws(CheckpointError) -> T
    {
        do {
            return try body()
        } catch let error as CheckpointError {
            throw error
        } catch let error as SQLiteError {
            throw CheckpointError.from(error, path: path, doing: doing())
        } catch {
            throw CheckpointError(code: .database, message: "\(doing()) on \(path): \(error)")
        }
    }
}
