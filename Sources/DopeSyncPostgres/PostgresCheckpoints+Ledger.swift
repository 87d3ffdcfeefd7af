import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport
import Foundation
import PostgresNIO

/// What `status`, `requeue`, `prune` and `inspect` read and change, from any host.
extension PostgresCheckpoints: CheckpointLedger {
    public func halfSessions() async throws(CheckpointError) -> [HalfSession] {
        var sessions: [HalfSession] = []
        for row in try await rows(
            "reading half sessions", PostgresQuery(unsafeSQL: HalfSession.selectSQL(schema: "dopesync.")))
        {
            let records: Int32 = try Self.decode(row, "records")
            let total: Int32? = try Self.decode(row, "steps_total")
            sessions.append(
                HalfSession(
                    name: try Self.decode(row, "name"), sessionID: try Self.decode(row, "session_id"),
                    records: Int(records), stepsTotal: total.map(Int.init), since: try Self.decode(row, "since")))
        }
        return sessions
    }

    public func bundles(withOutcome outcome: BundleOutcome?) async throws(CheckpointError) -> [BundleState] {
        let query: PostgresQuery =
            if let outcome {
                "\(unescaped: Self.bundleColumns()) WHERE last_outcome = \(outcome.rawValue) ORDER BY name"
            } else {
                "\(unescaped: Self.bundleColumns()) ORDER BY name"
            }
        var states: [BundleState] = []
        for row in try await rows("reading bundles", query) { states.append(try Self.bundleState(row)) }
        return states
    }

    /// Every claim held, or whose lease ran out without being taken over, with the database's
    /// clock beside it: a lease's age and time left are on that clock alone.
    public func claims() async throws(CheckpointError) -> [ClaimRecord] {
        let rows = try await rows(
            "reading claims",
            """
            SELECT bundle_name, run_id, host, pid, claimed_at, lease_expires_at, \(unescaped: Self.databaseNow) AS read_at
            FROM dopesync.claims WHERE run_id IS NOT NULL ORDER BY claimed_at, bundle_name
            """)
        var claims: [ClaimRecord] = []
        for row in rows {
            var claim = ClaimRecord(
                bundleName: try Self.decode(row, "bundle_name"),
                owner: ClaimOwner(
                    host: try Self.decode(row, "host"), pid: Int32(try Self.decode(row, "pid") as Int),
                    runID: try Self.decode(row, "run_id")),
                claimedAt: Date(timeIntervalSince1970: try Self.decode(row, "claimed_at")))
            claim.leaseExpiresAt = Date(timeIntervalSince1970: try Self.decode(row, "lease_expires_at"))
            claim.readAt = Date(timeIntervalSince1970: try Self.decode(row, "read_at"))
            claims.append(claim)
        }
        return claims
    }

    /// Runs started ahead of ``WallClock/latestBelievable(at:)`` count as older than the others,
    /// here and below: that host's clock went back since they started.
    public func lastFinishedRunOfEachHost() async throws(CheckpointError) -> [RunRecord] {
        let latest = WallClock.latestBelievable(at: Date()).timeIntervalSince1970
        return try await runs(
            """
            SELECT DISTINCT ON (host) \(unescaped: Self.runColumns) WHERE finished_at IS NOT NULL
            ORDER BY host, started_at <= \(latest) DESC, started_at DESC
            """,
            newestFirst: true)
    }

    public func recentRuns(limit: Int) async throws(CheckpointError) -> [RunRecord] {
        // Two walks of the start-time index, as in the SQLite store: not a sort of every run.
        let latest = WallClock.latestBelievable(at: Date()).timeIntervalSince1970
        var runs: [RunRecord] = []
        for side in ["<=", ">"] where runs.count < limit {
            runs += try await self.runs(
                """
                SELECT \(unescaped: Self.runColumns) WHERE started_at \(unescaped: side) \(latest)
                ORDER BY started_at DESC LIMIT \(limit - runs.count)
                """,
                newestFirst: false)
        }
        return runs
    }

    static let runColumns = """
        run_id, host, pid, started_at, finished_at, claimed, done, deferred, failed, requests, bytes, seconds,
        exit_code, api_lookups FROM dopesync.runs
        """

    private func runs(_ query: PostgresQuery, newestFirst: Bool) async throws(CheckpointError) -> [RunRecord] {
        var runs: [RunRecord] = []
        for row in try await rows("reading runs", query) {
            let finishedAt = (try Self.decode(row, "finished_at") as Double?).map(Date.init(timeIntervalSince1970:))
            // A finished run has every count (recordRunFinished writes them together).
            let summary: RunSummary? =
                finishedAt == nil
                ? nil
                : RunSummary(
                    claimed: try Self.decode(row, "claimed"), done: try Self.decode(row, "done"),
                    deferred: try Self.decode(row, "deferred"), failed: try Self.decode(row, "failed"),
                    requests: try Self.decode(row, "requests"), bytes: try Self.decode(row, "bytes"),
                    seconds: try Self.decode(row, "seconds"), exitCode: Int32(try Self.decode(row, "exit_code") as Int))
            runs.append(
                RunRecord(
                    runID: try Self.decode(row, "run_id"), host: try Self.decode(row, "host"),
                    pid: Int32(try Self.decode(row, "pid") as Int),
                    startedAt: Date(timeIntervalSince1970: try Self.decode(row, "started_at")), finishedAt: finishedAt,
                    summary: summary, apiLookups: try Self.decode(row, "api_lookups")))
        }
        let now = Date()
        return newestFirst ? runs.sorted { WallClock.newestFirst($0.startedAt, $1.startedAt, at: now) } : runs
    }

    public func steps(sessionID: String) async throws(CheckpointError) -> [StepRecord] {
        let rows = try await rows(
            "reading the steps of session \(sessionID)",
            """
            SELECT session_id, step_key, idempotency_key, request_fingerprint, content_digest, state, server_id,
                   sent_at, done_at, bundle_name
            FROM dopesync.steps WHERE session_id = \(sessionID) ORDER BY sent_at, step_key
            """)
        var steps: [StepRecord] = []
        for row in rows {
            guard let state = StepRecord.State(rawValue: try Self.decode(row, "state")) else {
                throw CheckpointError(code: .database, message: "steps.state is neither sent nor done")
            }
            steps.append(
                StepRecord(
                    sessionID: try Self.decode(row, "session_id"), stepKey: try Self.decode(row, "step_key"),
                    idempotencyKey: try Self.decode(row, "idempotency_key"),
                    requestFingerprint: try Self.decode(row, "request_fingerprint"),
                    contentDigest: try Self.decode(row, "content_digest"), state: state,
                    serverID: try Self.decode(row, "server_id"),
                    sentAt: Date(timeIntervalSince1970: try Self.decode(row, "sent_at")),
                    doneAt: (try Self.decode(row, "done_at") as Double?).map(Date.init(timeIntervalSince1970:)),
                    bundleName: try Self.decode(row, "bundle_name")))
        }
        return steps
    }

    public func cachedReferenceIDs() async throws(CheckpointError) -> ReferenceIDs {
        var ids = ReferenceIDs()
        for (list, cached) in try await referenceLists() {
            if let parsed = list.ids(fromBody: cached.body) { ids.add(parsed) }
        }
        return ids
    }

    public func resetAttempts(name: String, now: Date) async throws(CheckpointError) -> Bool {
        let t = now.timeIntervalSince1970
        return
            !(try await rows(
                "resetting the attempts of \(name)",
                """
                UPDATE dopesync.bundles SET attempts = 0, first_seen = \(t),
                    first_seen_boot = \(clock.firstSightStamp?.stored), next_attempt_at = NULL,
                    last_outcome = 'requeued', updated_at = \(t), reading_since = NULL, readings_cut_short = 0
                WHERE name = \(name) RETURNING name
                """)).isEmpty
    }

    public func makeDue(name: String, now: Date) async throws(CheckpointError) -> Bool {
        !(try await rows(
            "making \(name) due",
            """
            UPDATE dopesync.bundles SET next_attempt_at = \(now.timeIntervalSince1970)
            WHERE name = \(name) AND last_outcome = 'deferred' RETURNING name
            """)).isEmpty
    }

    /// Rows of bundles whose last outcome is `done` only (a newer bundle of the same name keeps
    /// its row), and the steps of sessions no bundle row names any more. Claims rows stay: their
    /// epochs only grow.
    public func forget(names: [String]) async throws(CheckpointError) -> Int {
        guard !names.isEmpty else { return 0 }
        return try await transaction("forgetting \(names.count) bundles") { connection in
            // Every write about a bundle holds its claim's row FOR SHARE (the fence), a claim's
            // record of its session included: this waits for those in progress and holds off new
            // ones for these few milliseconds. Without it, a continuation of a session claimed
            // at this moment had its session's steps deleted, its own row not yet committed and
            // so invisible to the check below (READ COMMITTED), and resent them after a crash.
            _ = try await connection.query("LOCK TABLE dopesync.claims IN EXCLUSIVE MODE", logger: self.logger)
            var sessions: [String] = []
            var deleted = 0
            for try await session in try await connection.query(
                """
                DELETE FROM dopesync.bundles WHERE name = ANY(\(names)) AND last_outcome = 'done' RETURNING session_id
                """, logger: self.logger
            ).decode(String?.self) {
                deleted += 1
                if let session { sessions.append(session) }
            }
            _ = try await connection.query(
                """
                DELETE FROM dopesync.steps s WHERE s.session_id = ANY(\(sessions))
                    AND NOT EXISTS (SELECT 1 FROM dopesync.bundles b WHERE b.session_id = s.session_id)
                """, logger: self.logger)
            return deleted
        }
    }

    public func renamed(from oldName: String, to newName: String, now: Date) async throws(CheckpointError) {
        guard oldName != newName else { return }
        try await transaction("renaming \(oldName) to \(newName)") { connection in
            // `requeue`'s move is into `incoming/`: the bundle takes its new name's row.
            try await Self.rename(connection, from: oldName, to: newName, keepingALiveRow: false, logger: self.logger)
        }
    }
}
