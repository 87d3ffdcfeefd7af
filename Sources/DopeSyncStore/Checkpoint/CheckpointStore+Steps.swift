import DopeSyncBundle
import DopeSyncSupport
import Foundation
import SQLiteSupport

/// The `steps` table: each upload step's intent, then its result (server id).
extension CheckpointStore {
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

    static func recordIntent(_ connection: SQLiteConnection, sessionID: String, _ intent: StepIntent, now: Date)
        throws -> StepIntentOutcome
    {
        let stored = try storedStep(connection, sessionID: sessionID, stepKey: intent.stepKey)
        let (write, outcome) = StepRules.intent(intent, stored: stored)
        try execute(write, connection, sessionID: sessionID, stepKey: intent.stepKey, now: now)
        return outcome
    }

    /// A step's row as ``StepRules`` reads it, or nil when the step has none.
    private static func storedStep(_ connection: SQLiteConnection, sessionID: String, stepKey: String) throws
        -> StepRules.Stored?
    {
        guard
            let row = try connection.queryFirst(
                """
                SELECT state, server_id, content_digest, done_at, request_fingerprint, bundle_name FROM steps
                WHERE session_id = ? AND step_key = ?
                """, [sessionID, stepKey])
        else { return nil }
        if try StepRecord.State(row["state"]) == .done { return .done(try CompletedStep(row)) }
        return .sent(
            requestFingerprint: try row["request_fingerprint"], contentDigest: try row["content_digest"],
            bundleName: try row["bundle_name"])
    }

    /// Executes what ``StepRules`` decided for one step.
    private static func execute(
        _ write: StepRules.Write?, _ connection: SQLiteConnection, sessionID: String, stepKey: String, now: Date
    ) throws {
        let time = now.timeIntervalSince1970
        switch write {
        case nil:
            return
        case .insert(let intent, let doneAs):
            try connection.query(
                """
                INSERT INTO steps (session_id, step_key, idempotency_key, request_fingerprint, content_digest, state,
                    server_id, sent_at, done_at, bundle_name)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
                [
                    sessionID, stepKey, intent.idempotencyKey, intent.requestFingerprint, intent.contentDigest,
                    (doneAs == nil ? StepRecord.State.sent : .done).rawValue, doneAs, time,
                    doneAs == nil ? nil : time, intent.bundleName,
                ])
        case .resend(let intent, let doneAs):
            try connection.query(
                """
                UPDATE steps SET idempotency_key = ?, request_fingerprint = ?, content_digest = ?, sent_at = ?, bundle_name = ?
                WHERE session_id = ? AND step_key = ?
                """,
                [
                    intent.idempotencyKey, intent.requestFingerprint, intent.contentDigest, time, intent.bundleName,
                    sessionID, stepKey,
                ])
            if let doneAs {
                try markDone(connection, sessionID: sessionID, stepKey: stepKey, serverID: doneAs, at: time)
            }
        case .markDone(let serverID):
            try markDone(connection, sessionID: sessionID, stepKey: stepKey, serverID: serverID, at: time)
        }
    }

    private static func markDone(
        _ connection: SQLiteConnection, sessionID: String, stepKey: String, serverID: Int64, at time: Double
    ) throws {
        try connection.query(
            "UPDATE steps SET state = 'done', server_id = ?, done_at = ? WHERE session_id = ? AND step_key = ?",
            [serverID, time, sessionID, stepKey])
        // The bundle's row is not touched: its steps done are counted when one bundle is read
        // (``BundleState/selectSQL(schema:countingStepsDone:)``).
        // A counter kept here cost a statement and a page of the WAL per step, for one line of
        // `requeue` (BENCHMARKS.md, 2026-11-26).
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

    /// Records a step's server id: the step becomes `done` (and counts toward its bundle's
    /// ``BundleState/stepsDone``, which is counted when read).
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
        try write(Self.describe(results)) { try Self.recordResults(results, in: $0, now: now) }
    }

    private static func describe(_ results: [StepResult]) -> String {
        "recording the result of step \(results.map { "\($0.stepKey) of session \($0.sessionID)" }.joined(separator: ", "))"
    }

    private static func recordResults(_ results: [StepResult], in connection: SQLiteConnection, now: Date) throws
        -> [Result<CompletedStep, CheckpointError>]
    {
        // One refused (no intent, another id) writes nothing and does not stop the others.
        try results.map { result in
            let stored = try storedStep(connection, sessionID: result.sessionID, stepKey: result.stepKey)
            let (write, outcome) = StepRules.result(result, stored: stored, now: now)
            try execute(write, connection, sessionID: result.sessionID, stepKey: result.stepKey, now: now)
            return outcome
        }
    }

    /// Records steps found on the server though they had no result here (a lost database,
    /// progress made elsewhere, a crash before the answer was recorded): each step's intent and
    /// its server id, all in one transaction. Returns each step as now done.
    public func recordFoundOnServer(
        sessionID: String, _ found: [(intent: StepIntent, serverID: Int64)], now: Date = Date()
    ) throws(CheckpointError) -> [CompletedStep] {
        try write("recording \(found.count) steps found on the server for session \(sessionID)") { connection in
            try found.map { entry in
                let stepKey = entry.intent.stepKey
                let stored = try Self.storedStep(connection, sessionID: sessionID, stepKey: stepKey)
                let (write, outcome) = StepRules.found(
                    entry.intent, serverID: entry.serverID, sessionID: sessionID, stored: stored, now: now)
                try Self.execute(write, connection, sessionID: sessionID, stepKey: stepKey, now: now)
                // A conflict undoes the whole transaction: nothing found is recorded.
                return try outcome.get()
            }
        }
    }

    /// The steps of a session that are done, by step key: the planner skips these, and compares each
    /// content digest with the bundle's to detect `changed_after_upload`.
    public func completedSteps(sessionID: String) throws(CheckpointError) -> [String: CompletedStep] {
        try read("reading the steps of session \(sessionID)") { try Self.completedSteps($0, sessionID: sessionID) }
    }

    static func completedSteps(_ connection: SQLiteConnection, sessionID: String) throws(SQLiteError) -> [String:
        CompletedStep]
    {
        var steps: [String: CompletedStep] = [:]
        try connection.forEachRow(
            "SELECT step_key, server_id, content_digest, done_at FROM steps WHERE session_id = ? AND state = 'done'",
            [sessionID]
        ) { row throws(SQLiteError) in
            steps[try row["step_key"]] = try CompletedStep(row)
        }
        return steps
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
            ).map { row in try StepRecord(row) }
        }
    }
}
