import Foundation
import PostgresNIO
import Synchronization

/// The two writes a run makes for every step, each one statement for a whole batch: one round
/// trip and no BEGIN/COMMIT, where a statement per row cost the worker and the server about
/// three times the CPU of the SQLite store per step (BENCHMARKS.md). The fence is inside the
/// statement: the claim rows are locked `FOR SHARE` under this worker's epochs, and only rows of
/// bundles whose claim holds are written.
extension PostgresCheckpoints {
    public func recordIntents(sessionID: String, _ intents: [CheckpointStore.StepIntent]) async throws(CheckpointError)
        -> [StepIntentOutcome]
    {
        guard let bundle = intents.first?.bundleName else { return [] }
        let fence = try fence(bundle)
        let now = Date().timeIntervalSince1970
        let rows = try await rows(
            "recording the intent of \(intents.map(\.stepKey))",
            """
            WITH fence AS (\(fence, lock: .share)), given AS (
                SELECT * FROM unnest(\(intents.map(\.stepKey))::text[], \(intents.map(\.idempotencyKey))::text[],
                    \(intents.map(\.requestFingerprint))::text[], \(intents.map(\.contentDigest))::text[])
                    AS given(step_key, idempotency_key, request_fingerprint, content_digest)
            ), before AS (
                SELECT s.step_key, s.state, s.server_id, s.content_digest, s.done_at, s.request_fingerprint
                FROM dopesync.steps s JOIN given USING (step_key) WHERE s.session_id = \(sessionID) FOR UPDATE OF s
            ), written AS (
                INSERT INTO dopesync.steps (session_id, step_key, idempotency_key, request_fingerprint, content_digest,
                    state, sent_at, bundle_name)
                SELECT \(sessionID), step_key, idempotency_key, request_fingerprint, content_digest, 'sent', \(now),
                    \(bundle)
                FROM given WHERE EXISTS (SELECT 1 FROM fence)
                ON CONFLICT (session_id, step_key) DO UPDATE SET idempotency_key = excluded.idempotency_key,
                    request_fingerprint = excluded.request_fingerprint, content_digest = excluded.content_digest,
                    sent_at = excluded.sent_at, bundle_name = excluded.bundle_name
                WHERE dopesync.steps.state = 'sent'
                RETURNING step_key
            )
            SELECT EXISTS (SELECT 1 FROM fence) AS fenced,
                before.step_key, before.state, before.server_id, before.content_digest, before.done_at,
                before.request_fingerprint
            FROM (VALUES (1)) AS one LEFT JOIN before ON true
            """)
        guard let first = rows.first, try Self.decode(first, "fenced") as Bool else { throw lost(fence) }
        var before: [String: PostgresRow] = [:]
        for row in rows {
            if let key: String = try Self.decode(row, "step_key") { before[key] = row }
        }
        return try intents.map { intent throws(CheckpointError) in
            guard let row = before[intent.stepKey] else { return .recorded }
            if try Self.decode(row, "state") as String == StepRecord.State.done.rawValue {
                return .alreadyDone(try Self.completedStep(row))
            }
            return .resent(previousFingerprint: try Self.decode(row, "request_fingerprint"))
        }
    }

    /// The results of one batch, in one statement; each fenced by the claim of the bundle that
    /// sent its step (the step row's `bundle_name`). One refused (no intent, another id, a claim
    /// lost) changes nothing and does not stop the others.
    func recordResultsNow(_ results: [CheckpointStore.StepResult]) async throws(CheckpointError)
        -> [Result<CompletedStep, CheckpointError>]
    {
        guard let owner, !results.isEmpty else { return [] }
        let now = Date().timeIntervalSince1970
        let held = leaseBook.withLock { book in book.leases.filter { !$0.value.lost }.mapValues(\.epoch) }
        let rows = try await rows(
            "recording the results of \(results.count) steps",
            """
            WITH given AS (
                SELECT * FROM unnest(\(results.map(\.sessionID))::text[], \(results.map(\.stepKey))::text[],
                    \(results.map(\.serverID))::bigint[]) AS given(session_id, step_key, new_id)
            ), current AS (
                SELECT s.session_id, s.step_key, s.state, s.server_id, s.content_digest, s.done_at, s.bundle_name,
                    given.new_id
                FROM dopesync.steps s JOIN given USING (session_id, step_key) FOR UPDATE OF s
            ), fence AS (
                SELECT c.bundle_name FROM dopesync.claims c
                JOIN unnest(\(Array(held.keys))::text[], \(Array(held.values))::bigint[]) AS mine(name, epoch)
                    ON c.bundle_name = mine.name AND c.epoch = mine.epoch
                WHERE c.run_id = \(owner.runID) AND c.bundle_name IN (SELECT bundle_name FROM current)
                FOR SHARE OF c
            ), done AS (
                UPDATE dopesync.steps s SET state = 'done', server_id = current.new_id, done_at = \(now)
                FROM current
                WHERE s.session_id = current.session_id AND s.step_key = current.step_key AND current.state = 'sent'
                    AND current.bundle_name IN (SELECT bundle_name FROM fence)
                RETURNING s.bundle_name
            ), counted AS (
                UPDATE dopesync.bundles b SET steps_done = b.steps_done + n.steps, updated_at = \(now)
                FROM (SELECT bundle_name, count(*) AS steps FROM done GROUP BY bundle_name) AS n
                WHERE b.name = n.bundle_name
                RETURNING b.name
            )
            SELECT current.session_id, current.step_key, current.state, current.server_id, current.content_digest,
                current.done_at, current.bundle_name, current.bundle_name IN (SELECT bundle_name FROM fence) AS fenced,
                (SELECT count(*) FROM counted) AS counted
            FROM current
            """)
        var found: [String: PostgresRow] = [:]
        for row in rows {
            let session: String = try Self.decode(row, "session_id")
            let key: String = try Self.decode(row, "step_key")
            found[session + "\u{0}" + key] = row
        }
        var outcomes: [Result<CompletedStep, CheckpointError>] = []
        for result in results {
            guard let row = found[result.sessionID + "\u{0}" + result.stepKey] else {
                outcomes.append(.failure(.noIntent(sessionID: result.sessionID, stepKey: result.stepKey)))
                continue
            }
            if try Self.decode(row, "state") as String == StepRecord.State.done.rawValue {
                let done = try Self.completedStep(row)
                outcomes.append(
                    done.serverID == result.serverID
                        ? .success(done)
                        : .failure(
                            .conflictingResult(
                                sessionID: result.sessionID, stepKey: result.stepKey, doneAs: done.serverID,
                                reportedAs: result.serverID, how: "now reported as")))
            } else if try Self.decode(row, "fenced") as Bool? == true {
                outcomes.append(
                    .success(
                        CompletedStep(
                            serverID: result.serverID, contentDigest: try Self.decode(row, "content_digest"),
                            doneAt: Date(timeIntervalSince1970: now))))
            } else {
                let bundle: String = try Self.decode(row, "bundle_name") ?? "?"
                if let epoch = held[bundle] { leaseBook.withLock { $0.lost(bundle, epoch: epoch) } }
                outcomes.append(.failure(Self.leaseLost(bundle)))
            }
        }
        return outcomes
    }
}
