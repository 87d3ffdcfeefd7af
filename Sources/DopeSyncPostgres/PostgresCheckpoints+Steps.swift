import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// The `steps` table: each step's intent, then its server id, as in the SQLite file
/// (`CheckpointStore` `+Steps`), each write fenced by the claim of the bundle that sends it.
extension PostgresCheckpoints {
    /// Steps found on the server, in one statement (``HotStatements/RecordFound``) inside a fenced
    /// transaction: a conflict undoes it, so nothing found is recorded, as in the SQLite file.
    public func recordFoundOnServer(
        sessionID: String, _ found: [(intent: CheckpointStore.StepIntent, serverID: Int64)]
    ) async throws(CheckpointError) -> [CompletedStep] {
        guard let bundle = found.first?.intent.bundleName else { return [] }
        let fence = try fence(bundle)
        let now = Date()
        let statement = HotStatements.RecordFound(
            intents: HotStatements.RecordIntents(
                fence: fence, sessionID: sessionID, time: now.timeIntervalSince1970, intents: found.map(\.intent)),
            serverIDs: found.map(\.serverID))
        return try await fencedTransaction(bundle, "recording \(found.count) steps found on the server") {
            connection in
            var rows: [PostgresRandomAccessRow] = []
            for try await row in try await connection.execute(statement, logger: self.logger) { rows.append(row) }
            let before = try Self.storedSteps(rows)
            return try found.map { entry in
                try StepRules.found(
                    entry.intent, serverID: entry.serverID, sessionID: sessionID, stored: before[entry.intent.stepKey],
                    now: now
                ).outcome.get()
            }
        }
    }

    public func recordResults(
        _ results: [CheckpointStore.StepResult],
        then: @escaping @Sendable (Result<[Result<CompletedStep, CheckpointError>], CheckpointError>) -> Void
    ) {
        let queued = enqueue {
            do throws(CheckpointError) {
                then(.success(try await self.recordResultsNow(results)))
            } catch {
                then(.failure(error))
            }
        }
        if !queued { then(.failure(CheckpointWriter.stopped)) }
    }

    /// A step's row as `StepRules` reads it.
    static func storedStep(_ row: PostgresRandomAccessRow) throws(CheckpointError) -> StepRules.Stored {
        if try decode(row, "state") as String == StepRecord.State.done.rawValue { return .done(try completedStep(row)) }
        return .sent(
            requestFingerprint: try decode(row, "request_fingerprint"),
            contentDigest: try decode(row, "content_digest"),
            bundleName: try decode(row, "bundle_name"))
    }

    /// The rows a statement returned as they were before it, by step key (a row with no
    /// `step_key` stands for none).
    static func storedSteps(_ rows: [PostgresRandomAccessRow]) throws(CheckpointError) -> [String: StepRules.Stored] {
        var stored: [String: StepRules.Stored] = [:]
        for row in rows {
            if let key: String = try decode(row, "step_key") { stored[key] = try storedStep(row) }
        }
        return stored
    }

    static func completedStep(_ row: PostgresRandomAccessRow) throws(CheckpointError) -> CompletedStep {
        CompletedStep(
            serverID: try decode(row, "server_id"), contentDigest: try decode(row, "content_digest"),
            doneAt: Date(timeIntervalSince1970: try decode(row, "done_at")))
    }
}
