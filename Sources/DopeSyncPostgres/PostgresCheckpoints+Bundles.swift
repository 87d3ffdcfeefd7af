import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// The `bundles` table: each bundle's attempts, outcome and last error, written under its claim.
extension PostgresCheckpoints {
    /// Bundles' rows (`BundleState/selectSQL(schema:countingStepsDone:)`).
    static func bundleColumns(countingStepsDone: Bool = false) -> String {
        BundleState.selectSQL(schema: "dopesync.", countingStepsDone: countingStepsDone)
    }

    public func bundlesInFlight() async throws(CheckpointError) -> [String: BundleState] {
        let rows = try await rows(
            "reading bundles in flight",
            "\(unescaped: Self.bundleColumns()) WHERE last_outcome IS NULL OR last_outcome NOT IN ('done', 'failed')")
        var states: [String: BundleState] = [:]
        for row in rows {
            let state = try Self.bundleState(row)
            states[state.name] = state
        }
        return states
    }

    public func restampDoneTimes(after latest: Date, to now: Date) async throws(CheckpointError) -> Int {
        try await rows(
            "recording done times ahead of the clock as now",
            """
            UPDATE dopesync.bundles SET updated_at = \(now.timeIntervalSince1970)
            WHERE last_outcome = 'done' AND updated_at > \(latest.timeIntervalSince1970) RETURNING name
            """
        ).count
    }

    public func doneTimes() async throws(CheckpointError) -> [String: Date] {
        let rows = try await rows(
            "reading done times", "SELECT name, updated_at FROM dopesync.bundles WHERE last_outcome = 'done'")
        var times: [String: Date] = [:]
        for row in rows {
            times[try Self.decode(row, "name")] = Date(timeIntervalSince1970: try Self.decode(row, "updated_at"))
        }
        return times
    }

    public func bundleState(name: String) async throws(CheckpointError) -> BundleState? {
        try await rows(
            "reading bundle \(name)", "\(unescaped: Self.bundleColumns(countingStepsDone: true)) WHERE name = \(name)"
        ).first.map {
            row throws(CheckpointError) in try Self.bundleState(row)
        }
    }

    /// One statement: the fence, then the bundle's row made or marked as being read. A row left
    /// by a bundle that finished (done or failed) under the same name belongs to another file: it
    /// starts afresh.
    public func beginReading(name: String, now: Date) async throws(CheckpointError) -> Int {
        let fence = try fence(name)
        let rows = try await rows(
            "recording that \(name) is being read",
            HotStatements.MarkReading(fence: fence, time: now.timeIntervalSince1970, firstSight: clock.firstSightStamp))
        guard let row = rows.first else { throw lost(fence) }
        return try Self.decode(row, "readings_cut_short")
    }

    /// One statement: the fence, the bundle's row, a new session bound to this producer and API,
    /// and the session's steps already done. A session known before whose binding is not this
    /// bundle's takes a transaction of its own (``bindSession(_:sessionID:producer:api:now:)``).
    public func recordClaim(
        name: String, sessionID: String, owner: ClaimOwner, producer: Producer, api: String, totalSteps: Int,
        now: Date
    ) async throws(CheckpointError) -> SessionClaim {
        let fence = try fence(name)
        let rows = try await rows(
            "recording the claim of \(name)",
            HotStatements.RecordClaim(
                fence: fence, sessionID: sessionID, time: now.timeIntervalSince1970, totalSteps: Int32(totalSteps),
                api: api, producer: producer, firstSight: clock.firstSightStamp))
        guard let first = rows.first, try Self.decode(first, "fenced") as Bool else { throw lost(fence) }
        let isNew: Bool = try Self.decode(first, "session_new")
        let known: Bool = try Self.decode(first, "session_known")
        if !isNew {
            let existing = known ? try Self.sessionBinding(first) : nil
            guard known, SessionBinding.decide(existing: existing, producer: producer, api: api) == .continuation
            else { return try await bindSession(name, sessionID: sessionID, producer: producer, api: api, now: now) }
        }
        var steps: [String: CompletedStep] = [:]
        for row in rows {
            guard let key: String = try Self.decode(row, "step_key") else { continue }
            steps[key] = try Self.completedStep(row)
        }
        return .resume(steps)
    }

    public func recordDeferral(name: String, sessionID: String?, error: BundleFailure, policy: DeferralPolicy)
        async throws(CheckpointError) -> Deferral
    {
        let now = Date()
        let (synchronized, boot) = (clock.isSynchronized(), clock.bootInstant())
        return try await fencedTransaction(name, "recording the deferral of \(name)") { connection in
            try await Self.ensureBundle(
                connection, name: name, now: now.timeIntervalSince1970, firstSight: synchronized ? nil : boot,
                logger: self.logger)
            let rows = try await connection.query(
                """
                UPDATE dopesync.bundles SET attempts = attempts + 1 WHERE name = \(name)
                RETURNING attempts, first_seen, first_seen_boot
                """,
                logger: self.logger
            ).collect()
            guard let row = rows.first?.makeRandomAccess() else {
                throw CheckpointError(code: .database, message: "bundle row \(name) vanished")
            }
            // As in the SQLite store's recordDeferral. Another host's first sight has its host
            // name in its stamp: its boot's clock is not this one's.
            let deferral = policy.deferral(
                attempts: try Self.decode(row, "attempts"),
                firstSeen: Date(timeIntervalSince1970: try Self.decode(row, "first_seen")),
                firstSeenOnBoot: BootInstant(stored: try Self.decode(row, "first_seen_boot")), now: now,
                nowOnBoot: boot, clockIsSynchronized: synchronized)
            if deferral.firstSeenDatedAgain {
                _ = try await connection.query(
                    """
                    UPDATE dopesync.bundles SET first_seen = \(deferral.firstSeen.timeIntervalSince1970),
                        first_seen_boot = NULL
                    WHERE name = \(name)
                    """, logger: self.logger)
            }
            try await self.setOutcome(
                connection, name: name, sessionID: sessionID, outcome: .deferred, error: error,
                nextAttemptAt: deferral.nextAttemptAt, now: now)
            // The claim ends with the give-back (recordGivenBack), after the move.
            return deferral
        }
    }

    public func recordDone(name: String, sessionID: String?, finalName: String) async throws(CheckpointError) {
        // The usual case, under its own name: one statement.
        if finalName == name {
            let fence = try fence(name)
            defer { leaseBook.withLock { $0.released(name) } }
            let rows = try await rows(
                "recording \(name) done",
                HotStatements.RecordDone(fence: fence, sessionID: sessionID, time: Date().timeIntervalSince1970))
            guard let first = rows.first, try Self.decode(first, "fenced") as Bool else { throw lost(fence) }
            return
        }
        try await recordEnd(name, finalName: finalName, "recording \(name) done") { connection in
            try await self.setOutcome(
                connection, name: name, sessionID: sessionID, outcome: .done, error: nil, nextAttemptAt: nil,
                now: Date(), keepError: true)
        }
    }

    public func recordFailure(name: String, sessionID: String?, error: BundleFailure, finalName: String)
        async throws(CheckpointError)
    {
        try await recordEnd(name, finalName: finalName, "recording the failure of \(name)") { connection in
            try await self.setOutcome(
                connection, name: name, sessionID: sessionID, outcome: .failed, error: error, nextAttemptAt: nil,
                now: Date())
        }
    }

    public func recordGivenBack(name: String, finalName: String, counted: Bool) async throws(CheckpointError) {
        try await recordEnd(name, finalName: finalName, keepingALiveRow: false, "recording \(name) given back") {
            connection in
            guard !counted else { return }
            _ = try await connection.query(
                """
                UPDATE dopesync.bundles SET last_outcome = 'returned', updated_at = \(Date().timeIntervalSince1970),
                    reading_since = NULL
                WHERE name = \(name)
                """, logger: self.logger)
        }
    }

    /// The bundle has moved out of `processing/`: its outcome, a new name if it took one, and the
    /// end of its claim, in one fenced transaction.
    private func recordEnd(
        _ name: String, finalName: String, keepingALiveRow: Bool = true, _ doing: @autoclosure () -> String,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Void
    ) async throws(CheckpointError) {
        defer { leaseBook.withLock { $0.released(name) } }
        try await fencedTransaction(name, doing()) { connection in
            try await body(connection)
            try await self.endClaim(name, on: connection)
            if finalName != name {
                try await Self.rename(
                    connection, from: name, to: finalName, keepingALiveRow: keepingALiveRow, logger: self.logger)
            }
        }
    }

    /// ``CheckpointStore/renamed(from:to:keepingALiveRow:now:)``'s rule: a finished row under the
    /// new name is replaced; into `done/` or `failed/`, a live one (another bundle's, perhaps
    /// claimed by another host now) stays, and the moved bundle's row keeps its old name.
    static func rename(
        _ connection: PostgresConnection, from oldName: String, to newName: String, keepingALiveRow: Bool,
        logger: Logger
    ) async throws {
        let replaced = keepingALiveRow ? "AND last_outcome IN \(BundleOutcome.finishedSQL)" : ""
        let t = Date().timeIntervalSince1970
        _ = try await connection.query(
            """
            DELETE FROM dopesync.bundles WHERE name = \(newName) \(unescaped: replaced)
                AND EXISTS (SELECT 1 FROM dopesync.bundles WHERE name = \(oldName))
            """, logger: logger)
        let renamed = try await connection.query(
            """
            UPDATE dopesync.bundles SET name = \(newName), updated_at = \(t) WHERE name = \(oldName)
                AND NOT EXISTS (SELECT 1 FROM dopesync.bundles WHERE name = \(newName))
            RETURNING name
            """, logger: logger
        ).collect()
        guard !renamed.isEmpty else { return }
        _ = try await connection.query(
            "UPDATE dopesync.steps SET bundle_name = \(newName) WHERE bundle_name = \(oldName)", logger: logger)
    }

    static func ensureBundle(
        _ connection: PostgresConnection, name: String, now: Double, firstSight: BootInstant?, logger: Logger
    ) async throws {
        _ = try await connection.query(
            """
            INSERT INTO dopesync.bundles (name, first_seen, first_seen_boot, updated_at)
            VALUES (\(name), \(now), \(firstSight?.stored), \(now))
            ON CONFLICT (name) DO NOTHING
            """, logger: logger)
    }

    func setOutcome(
        _ connection: PostgresConnection, name: String, sessionID: String?, outcome: BundleOutcome,
        error: BundleFailure?, nextAttemptAt: Date?, now: Date, keepError: Bool = false
    ) async throws {
        let t = now.timeIntervalSince1970
        let next = nextAttemptAt?.timeIntervalSince1970
        if keepError {
            _ = try await connection.query(
                """
                UPDATE dopesync.bundles SET session_id = COALESCE(\(sessionID), session_id), last_outcome = \(outcome.rawValue),
                    next_attempt_at = \(next), updated_at = \(t), reading_since = NULL
                WHERE name = \(name)
                """, logger: logger)
        } else {
            _ = try await connection.query(
                """
                UPDATE dopesync.bundles SET session_id = COALESCE(\(sessionID), session_id), last_outcome = \(outcome.rawValue),
                    next_attempt_at = \(next), updated_at = \(t), reading_since = NULL,
                    last_error_reason = \(error?.reason.rawValue), last_error_step = \(error?.step),
                    last_error_http_status = \(error?.httpStatus), last_error_message = \(error?.message),
                    last_error_field = \(error?.field)
                WHERE name = \(name)
                """, logger: logger)
        }
    }

    static func bundleState(_ row: PostgresRandomAccessRow) throws(CheckpointError) -> BundleState {
        var error: BundleFailure? = nil
        if let reason: String = try decode(row, "last_error_reason") {
            error = BundleFailure(
                reason: FailureReason(rawValue: reason), step: try decode(row, "last_error_step"),
                httpStatus: try decode(row, "last_error_http_status"), field: try decode(row, "last_error_field"),
                message: try decode(row, "last_error_message"))
        }
        return BundleState(
            name: try decode(row, "name"), sessionID: try decode(row, "session_id"),
            attempts: try decode(row, "attempts"),
            firstSeen: Date(timeIntervalSince1970: try decode(row, "first_seen")),
            firstSeenOnBoot: BootInstant(stored: try decode(row, "first_seen_boot")),
            nextAttemptAt: (try decode(row, "next_attempt_at") as Double?).map(Date.init(timeIntervalSince1970:)),
            lastError: error,
            lastOutcome: (try decode(row, "last_outcome") as String?).map(BundleOutcome.init(rawValue:)),
            updatedAt: Date(timeIntervalSince1970: try decode(row, "updated_at")),
            stepsDone: try decode(row, "steps_done"), stepsTotal: try decode(row, "steps_total"))
    }
}
