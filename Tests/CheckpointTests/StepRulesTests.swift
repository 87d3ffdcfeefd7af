import DopeSync
import Foundation
import Testing

/// The rules of the `steps` table that both stores execute (``StepRules``), without a database:
/// what an intent, a result and a step found on the server write to a step's row, and what the
/// uploader hears.
@Suite struct StepRulesTests {
    let now = Date(timeIntervalSince1970: 1_700_000_000)
    let earlier = Date(timeIntervalSince1970: 1_600_000_000)
    let intent = CheckpointStore.StepIntent(
        stepKey: "dope:3", idempotencyKey: "key-2", requestFingerprint: "f-2", contentDigest: "d-2",
        bundleName: "b.tar.gz")
    var sent: StepRules.Stored { .sent(requestFingerprint: "f-1", contentDigest: "d-1", bundleName: "a.tar.gz") }
    var done: StepRules.Stored { .done(CompletedStep(serverID: 41, contentDigest: "d-1", doneAt: earlier)) }

    func result(_ serverID: Int64) -> CheckpointStore.StepResult {
        CheckpointStore.StepResult(sessionID: "s1", stepKey: "dope:3", serverID: serverID)
    }

    @Test func aFirstIntentInsertsASentRow() throws {
        let (write, outcome) = StepRules.intent(intent, stored: nil)
        #expect(write == .insert(intent, doneAs: nil))
        #expect(outcome == .recorded)
    }

    @Test func anIntentForAStepSentBeforeOverwritesItAndNamesTheOldFingerprint() throws {
        let (write, outcome) = StepRules.intent(intent, stored: sent)
        #expect(write == .resend(intent, doneAs: nil))
        #expect(outcome == .resent(previousFingerprint: "f-1"), "a changed request must be noticed before sending")
    }

    @Test func anIntentForAStepDoneWritesNothingAndSaysNotToSendIt() throws {
        let (write, outcome) = StepRules.intent(intent, stored: done)
        #expect(write == nil)
        #expect(outcome == .alreadyDone(CompletedStep(serverID: 41, contentDigest: "d-1", doneAt: earlier)))
    }

    @Test func aResultMarksASentStepDoneWithTheDigestItWasSentWith() throws {
        let (write, outcome) = StepRules.result(result(42), stored: sent, now: now)
        #expect(write == .markDone(42))
        #expect(try outcome.get() == CompletedStep(serverID: 42, contentDigest: "d-1", doneAt: now))
    }

    @Test func theSameResultAgainChangesNothing() throws {
        let (write, outcome) = StepRules.result(result(41), stored: done, now: now)
        #expect(write == nil)
        #expect(try outcome.get() == CompletedStep(serverID: 41, contentDigest: "d-1", doneAt: earlier))
    }

    @Test func anotherServerIDForAStepDoneIsAConflictThatNamesBothIDs() throws {
        let (write, outcome) = StepRules.result(result(99), stored: done, now: now)
        #expect(write == nil)
        #expect { try outcome.get() } throws: { error in
            let error = error as? CheckpointError
            return error?.code == .conflictingResult
                && error?.message.contains("server id 41, now reported as 99")
                    == true
        }
    }

    @Test func aResultWithNoIntentIsRefused() throws {
        let (write, outcome) = StepRules.result(result(42), stored: nil, now: now)
        #expect(write == nil)
        #expect { try outcome.get() } throws: { ($0 as? CheckpointError)?.code == .noIntent }
    }

    @Test func aResultWhoseBundleLostItsClaimIsNotWrittenAndNamesTheBundle() throws {
        let (write, outcome) = StepRules.result(result(42), stored: sent, claimHeld: false, now: now)
        #expect(write == nil)
        #expect { try outcome.get() } throws: { error in
            let error = error as? CheckpointError
            return error?.code == .leaseLost && error?.message.contains("a.tar.gz") == true
        }
    }

    @Test func aStepDoneStaysDoneWhoeverHoldsTheClaimNow() throws {
        // Done is a fact about the server, not about this worker's claim: it is reported, not refused.
        let (write, outcome) = StepRules.result(result(41), stored: done, claimHeld: false, now: now)
        #expect(write == nil)
        #expect((try? outcome.get())?.serverID == 41)
    }

    @Test func aStepFoundOnTheServerIsWrittenDoneAtOnceWithItsIntent() throws {
        let (new, newOutcome) = StepRules.found(intent, serverID: 42, sessionID: "s1", stored: nil, now: now)
        #expect(new == .insert(intent, doneAs: 42))
        #expect(try newOutcome.get() == CompletedStep(serverID: 42, contentDigest: "d-2", doneAt: now))

        let (resent, resentOutcome) = StepRules.found(intent, serverID: 42, sessionID: "s1", stored: sent, now: now)
        #expect(resent == .resend(intent, doneAs: 42))
        #expect(try resentOutcome.get() == CompletedStep(serverID: 42, contentDigest: "d-2", doneAt: now))
    }

    @Test func aStepFoundOnTheServerUnderAnotherIDThanRecordedIsAConflict() throws {
        let (same, sameOutcome) = StepRules.found(intent, serverID: 41, sessionID: "s1", stored: done, now: now)
        #expect(same == nil)
        #expect((try? sameOutcome.get())?.doneAt == earlier)

        let (other, otherOutcome) = StepRules.found(intent, serverID: 7, sessionID: "s1", stored: done, now: now)
        #expect(other == nil)
        #expect { try otherOutcome.get() } throws: { error in
            let error = error as? CheckpointError
            return error?.code == .conflictingResult && error?.message.contains("found on the server as 7") == true
        }
    }
}
