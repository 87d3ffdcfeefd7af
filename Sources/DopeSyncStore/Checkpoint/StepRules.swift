import DopeSyncBundle
import DopeSyncSupport
import Foundation

/// The rules of the `steps` table, written once for both stores: given a step's row as stored (or
/// none), what an intent, a result or a step found on the server writes, and what the caller
/// hears. No database here. The SQLite store reads each row, asks, and executes the write. The
/// PostgreSQL store writes a batch in one statement whose `WHERE state = 'sent'` is the same rule
/// (only a missing row or a `sent` one is written), and takes every outcome from here, from the
/// rows as they were before the statement.
public enum StepRules {
    /// A step's row, as far as the rules need it.
    public enum Stored: Sendable, Hashable {
        /// Its intent is recorded (the request may or may not have reached the server).
        case sent(requestFingerprint: String, contentDigest: String, bundleName: String?)
        /// Its server id is recorded: never sent again, never changed.
        case done(CompletedStep)
    }

    /// What a rule writes to a step's row. Only a missing row or one in state `sent` is written.
    public enum Write: Sendable, Equatable {
        /// A new row: `sent` with this intent, or at once `done` as `doneAs`.
        case insert(CheckpointStore.StepIntent, doneAs: Int64?)
        /// The `sent` row gets this intent (idempotency key, fingerprint, digest, bundle, sent
        /// time), and becomes `done` as `doneAs` if given.
        case resend(CheckpointStore.StepIntent, doneAs: Int64?)
        /// The `sent` row becomes `done` with this server id.
        case markDone(Int64)
    }

    /// The intent of a step about to be sent. A `done` step is left alone and the caller must not
    /// send it: not an error, since another bundle of the same session, in another run, may have
    /// completed it since the plan was made.
    public static func intent(_ intent: CheckpointStore.StepIntent, stored: Stored?) -> (
        write: Write?, outcome: StepIntentOutcome
    ) {
        switch stored {
        case nil:
            return (.insert(intent, doneAs: nil), .recorded)
        case .sent(let previousFingerprint, _, _):
            return (.resend(intent, doneAs: nil), .resent(previousFingerprint: previousFingerprint))
        case .done(let done):
            return (nil, .alreadyDone(done))
        }
    }

    /// A step's server id as the API answered it. The same id again changes nothing; another id for
    /// a step done throws ``CheckpointError/Code/conflictingResult`` (the record may exist twice on
    /// the server); a step with no intent is ``CheckpointError/Code/noIntent`` (a bug in the
    /// caller). `claimHeld`: whether the claim of the bundle that sent it still holds; a step not
    /// yet done is not written without it (``CheckpointError/Code/leaseLost``).
    public static func result(
        _ result: CheckpointStore.StepResult, stored: Stored?, claimHeld: Bool = true, now: Date
    ) -> (write: Write?, outcome: Result<CompletedStep, CheckpointError>) {
        switch stored {
        case nil:
            return (nil, .failure(.noIntent(sessionID: result.sessionID, stepKey: result.stepKey)))
        case .done(let done):
            return (nil, confirm(done, result, how: "now reported as"))
        case .sent(_, let contentDigest, let bundleName):
            guard claimHeld else { return (nil, .failure(.leaseLost(bundleName ?? "?"))) }
            return (
                .markDone(result.serverID),
                .success(CompletedStep(serverID: result.serverID, contentDigest: contentDigest, doneAt: now))
            )
        }
    }

    /// A step found on the server though no result was recorded here (a lost database, progress
    /// made elsewhere, a crash before the answer was recorded): its intent and its server id at once.
    public static func found(
        _ intent: CheckpointStore.StepIntent, serverID: Int64, sessionID: String, stored: Stored?, now: Date
    ) -> (write: Write?, outcome: Result<CompletedStep, CheckpointError>) {
        let found = CompletedStep(serverID: serverID, contentDigest: intent.contentDigest, doneAt: now)
        switch stored {
        case nil:
            return (.insert(intent, doneAs: serverID), .success(found))
        case .sent:
            return (.resend(intent, doneAs: serverID), .success(found))
        case .done(let done):
            let reported = CheckpointStore.StepResult(sessionID: sessionID, stepKey: intent.stepKey, serverID: serverID)
            return (nil, confirm(done, reported, how: "found on the server as"))
        }
    }

    private static func confirm(_ done: CompletedStep, _ result: CheckpointStore.StepResult, how: String)
        -> Result<CompletedStep, CheckpointError>
    {
        guard done.serverID == result.serverID else {
            return .failure(
                .conflictingResult(
                    sessionID: result.sessionID, stepKey: result.stepKey, doneAs: done.serverID,
                    reportedAs: result.serverID, how: how))
        }
        return .success(done)
    }
}
