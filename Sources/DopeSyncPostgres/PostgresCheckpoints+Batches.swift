import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport
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
            HotStatements.RecordIntents(fence: fence, sessionID: sessionID, time: now, intents: intents))
        guard let first = rows.first, try Self.decode(first, "fenced") as Bool else { throw lost(fence) }
        let before = try Self.storedSteps(rows)
        return intents.map { StepRules.intent($0, stored: before[$0.stepKey]).outcome }
    }

    /// The results of one batch, in one statement; each fenced by the claim of the bundle that
    /// sent its step (the step row's `bundle_name`). One refused (no intent, another id, a claim
    /// lost) changes nothing and does not stop the others.
    func recordResultsNow(_ results: [CheckpointStore.StepResult]) async throws(CheckpointError)
        -> [Result<CompletedStep, CheckpointError>]
    {
        guard let owner, !results.isEmpty else { return [] }
        let now = Date()
        let held = leaseBook.withLock { book in book.leases.filter { !$0.value.lost }.mapValues(\.epoch) }
        let rows = try await rows(
            "recording the results of \(results.count) steps",
            HotStatements.RecordResults(
                runID: owner.runID, time: now.timeIntervalSince1970, results: results,
                held: held.map { ($0.key, $0.value) }))
        var found: [String: (stored: StepRules.Stored, fenced: Bool)] = [:]
        for row in rows {
            let session: String = try Self.decode(row, "session_id")
            let key: String = try Self.decode(row, "step_key")
            found[session + "\u{0}" + key] = (try Self.storedStep(row), try Self.decode(row, "fenced") as Bool? == true)
        }
        return results.map { result in
            let row = found[result.sessionID + "\u{0}" + result.stepKey]
            let outcome = StepRules.result(result, stored: row?.stored, claimHeld: row?.fenced ?? false, now: now)
                .outcome
            if case .failure(let error) = outcome, error.code == .leaseLost,
                case .sent(_, _, let bundle?) = row?.stored, let epoch = held[bundle]
            {
                leaseBook.withLock { $0.lost(bundle, epoch: epoch) }
            }
            return outcome
        }
    }
}
