import Foundation
import Logging
import PostgresNIO
import Synchronization

/// The `steps` table: each step's intent, then its server id, as in the SQLite file
/// (``CheckpointStore`` `+Steps`), each write fenced by the claim of the bundle that sends it.
extension PostgresCheckpoints {
    static func recordIntent(
        _ connection: PostgresConnection, sessionID: String, _ intent: CheckpointStore.StepIntent, now: Double,
        logger: Logger
    ) async throws -> StepIntentOutcome {
        let existing = try await connection.query(
            """
            SELECT state, server_id, content_digest, done_at, request_fingerprint FROM dopesync.steps
            WHERE session_id = \(sessionID) AND step_key = \(intent.stepKey) FOR UPDATE
            """, logger: logger
        ).collect().first?.makeRandomAccess()
        if let existing {
            if try decode(existing, "state") as String == StepRecord.State.done.rawValue {
                return .alreadyDone(try completedStep(existing))
            }
            _ = try await connection.query(
                """
                UPDATE dopesync.steps SET idempotency_key = \(intent.idempotencyKey),
                    request_fingerprint = \(intent.requestFingerprint), content_digest = \(intent.contentDigest),
                    sent_at = \(now), bundle_name = \(intent.bundleName)
                WHERE session_id = \(sessionID) AND step_key = \(intent.stepKey)
                """, logger: logger)
            return .resent(previousFingerprint: try decode(existing, "request_fingerprint"))
        }
        _ = try await connection.query(
            """
            INSERT INTO dopesync.steps
                (session_id, step_key, idempotency_key, request_fingerprint, content_digest, state, sent_at, bundle_name)
            VALUES (\(sessionID), \(intent.stepKey), \(intent.idempotencyKey), \(intent.requestFingerprint),
                    \(intent.contentDigest), 'sent', \(now), \(intent.bundleName))
            """, logger: logger)
        return .recorded
    }

    public func recordFoundOnServer(
        sessionID: String, _ found: [(intent: CheckpointStore.StepIntent, serverID: Int64)]
    ) async throws(CheckpointError) -> [CompletedStep] {
        guard let bundle = found.first?.intent.bundleName else { return [] }
        let now = Date().timeIntervalSince1970
        return try await fencedTransaction(bundle, "recording \(found.count) steps found on the server") { connection in
            try await found.asyncMap { entry in
                let outcome = try await Self.recordIntent(
                    connection, sessionID: sessionID, entry.intent, now: now, logger: self.logger)
                if case .alreadyDone(let done) = outcome {
                    guard done.serverID == entry.serverID else {
                        throw CheckpointError.conflictingResult(
                            sessionID: sessionID, stepKey: entry.intent.stepKey, doneAs: done.serverID,
                            reportedAs: entry.serverID, how: "found on the server as")
                    }
                    return done
                }
                return try await Self.recordResult(
                    connection,
                    CheckpointStore.StepResult(
                        sessionID: sessionID, stepKey: entry.intent.stepKey, serverID: entry.serverID),
                    now: now, logger: self.logger)
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

    static func recordResult(
        _ connection: PostgresConnection, _ result: CheckpointStore.StepResult, now: Double, logger: Logger
    ) async throws -> CompletedStep {
        let (sessionID, stepKey, serverID) = (result.sessionID, result.stepKey, result.serverID)
        guard
            let row = try await connection.query(
                """
                SELECT state, server_id, content_digest, done_at FROM dopesync.steps
                WHERE session_id = \(sessionID) AND step_key = \(stepKey) FOR UPDATE
                """, logger: logger
            ).collect().first?.makeRandomAccess()
        else {
            throw CheckpointError.noIntent(sessionID: sessionID, stepKey: stepKey)
        }
        if try decode(row, "state") as String == StepRecord.State.done.rawValue {
            let done = try completedStep(row)
            guard done.serverID == serverID else {
                throw CheckpointError.conflictingResult(
                    sessionID: sessionID, stepKey: stepKey, doneAs: done.serverID, reportedAs: serverID,
                    how: "now reported as")
            }
            return done
        }
        _ = try await connection.query(
            """
            UPDATE dopesync.steps SET state = 'done', server_id = \(serverID), done_at = \(now)
            WHERE session_id = \(sessionID) AND step_key = \(stepKey)
            """, logger: logger)
        // The bundle's row is not touched: its steps done are counted when one bundle is read
        // (``BundleState/selectSQL(schema:countingStepsDone:)``).
        return CompletedStep(
            serverID: serverID, contentDigest: try decode(row, "content_digest"),
            doneAt: Date(timeIntervalSince1970: now))
    }

    static func completedStep(_ row: PostgresRandomAccessRow) throws(CheckpointError) -> CompletedStep {
        CompletedStep(
            serverID: try decode(row, "server_id"), contentDigest: try decode(row, "content_digest"),
            doneAt: Date(timeIntervalSince1970: try decode(row, "done_at")))
    }
}

extension Array {
    /// `map` with an async body, one element after another (each a statement on one connection).
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var mapped: [T] = []
        mapped.reserveCapacity(count)
        for element in self { mapped.append(try await transform(element)) }
        return mapped
    }
}
