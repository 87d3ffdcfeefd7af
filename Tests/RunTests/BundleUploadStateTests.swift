import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// One bundle's upload as a value (``BundleUploadState``): events in, actions out. No server, no
/// database, no clock: each path through a bundle is driven here by a script.
@Suite struct BundleUploadStateTests {
    /// A session of 1 DOPE entry, 1 chrono with 2 readings, 1 group with its measurement; no images.
    static let plan: UploadPlan = {
        var shape = SampleSession.Shape()
        shape.dopeEntries = 1
        shape.chronoSessions = 1
        shape.readingsPerChrono = 2
        shape.groups = 1
        shape.imagesPerGroup = 0
        shape.measurementImages = false
        let sample = SampleSession(seed: 77, shape: shape)
        guard case .success(let document) = SessionValidator.validate(sample.sessionBytes, maxBytes: 1 << 20) else {
            preconditionFailure("the sample session is valid")
        }
        return try! UploadPlan(session: document, images: [:])  // no image: nothing to miss
    }()
    static var keys: [String] { plan.steps.map(\.key) }

    /// What the world answers, per action; each defaults to "all went well".
    struct Script {
        var intentOutcomes: ([CheckpointStore.StepIntent]) -> [StepIntentOutcome]? = { $0.map { _ in .recorded } }
        /// What a look on the server finds; nothing, unless a test says otherwise.
        var look: (UploadStep, BundleUploadState.LookUp) -> ServerLookup.Found = { _, _ in .tree(nil) }
        var answer: (UploadStep) -> StepResponse = { step in
            .created(id: Int64(BundleUploadStateTests.keys.firstIndex(of: step.key)! + 1), replayed: false)
        }
        /// Whether a credential other than the refused one can be read.
        var renews = false
        /// Whose a refusal that stood is, once the token was checked alone.
        var tokenVerdict = APIClient.TokenVerdict.token
        var backOff = BundleUploadState.BackOff.waited
        var settles: (_ stepKey: String) -> Bool = { _ in true }
        /// Whether the steps a look found on the server can be recorded as done.
        var recordsFound = true
        var references: ([ReferenceUse]) -> ReferenceCatalog.Check = { _ in .passed }
        var stopping: (_ sent: Int) -> Bool = { _ in false }
    }

    /// Drives `state` with `script` to the end, from its start or from `first`, an action it returned.
    /// Returns the trace (one line per action) and where the bundle went.
    static func drive(
        _ state: inout BundleUploadState, _ script: Script = Script(), from first: BundleUploadState.Action? = nil
    ) -> (trace: [String], finish: BundleUploadState.Finish) {
        var trace: [String] = []
        var sent = 0
        var handedIn: [String] = []  // the step of each result handed in, by its ticket
        var settledCount = 0
        var action = first ?? state.start(stopping: script.stopping(0))
        while true {
            switch action {
            case .checkReferences(let uses):
                trace.append("check \(uses.map(\.field).joined(separator: ","))")
                action = state.referencesChecked(script.references(uses), stopping: script.stopping(sent))
            case .recordIntents(let intents):
                trace.append("intents \(intents.map(\.stepKey).joined(separator: ","))")
                if let outcomes = script.intentOutcomes(intents) {
                    action = state.intentsRecorded(outcomes, stopping: script.stopping(sent))
                } else {
                    action = state.checkpointFailed()
                }
            case .lookUp(let step, let target):
                trace.append("look \(step.key)")
                action = state.looked(script.look(step, target), stopping: script.stopping(sent))
            case .recordFound(let found):
                trace.append("record found \(found.map(\.intent.stepKey).joined(separator: ","))")
                guard script.recordsFound else {
                    action = state.checkpointFailed()
                    continue
                }
                action = state.foundRecorded(recorded(found), stopping: script.stopping(sent))
            case .send(let step, _):
                trace.append("send \(step.key)")
                sent += 1
                action = state.answered(script.answer(step), stopping: script.stopping(sent))
            case .renewCredential:
                trace.append("renew credential")
                action = state.credentialRenewed(script.renews, stopping: script.stopping(sent))
            case .checkToken:
                trace.append("check token")
                action = state.tokenChecked(script.tokenVerdict, stopping: script.stopping(sent))
            case .backOff(let step, let retry, _, _):
                trace.append("back off \(step.key) \(retry)")
                action = state.backedOff(script.backOff, stopping: script.stopping(sent))
            case .handInResult(let result, let found):
                trace.append("hand in \(result.stepKey)=\(result.serverID)\(found ? " (found)" : "")")
                handedIn.append(result.stepKey)
                action = state.resultHandedIn(handedIn.count - 1, stopping: script.stopping(sent))
            case .settleResult(let ticket):
                // Results settle oldest first, each once.
                #expect(ticket == settledCount)
                settledCount += 1
                let oldest = handedIn[ticket]
                trace.append("settle \(oldest)")
                action = state.settled(committed: script.settles(oldest), stopping: script.stopping(sent))
            case .finish(let finish):
                // Every result handed in was settled before the bundle's end.
                #expect(settledCount == handedIn.count, "\(handedIn.count - settledCount) results never settled")
                return (trace, finish)
            }
        }
    }

    /// The steps a look found, as the checkpoint database records them done.
    static func recorded(_ found: [BundleUploadState.FoundStep]) -> [(stepKey: String, done: CompletedStep)] {
        found.map {
            (
                stepKey: $0.intent.stepKey,
                done: CompletedStep(serverID: $0.serverID, contentDigest: $0.intent.contentDigest, doneAt: Date())
            )
        }
    }

    /// The tests of the steps leave the reference check out (``referencesAreCheckedFirst()`` and
    /// the ones after it have it).
    static func fresh(completed: [String: CompletedStep] = [:], checksReferences: Bool = false) -> BundleUploadState {
        BundleUploadState(plan: plan, bundleName: "b.tar.gz", completed: completed, checksReferences: checksReferences)
    }

    static func done(_ steps: some Sequence<UploadStep>) -> [String: CompletedStep] {
        Dictionary(
            uniqueKeysWithValues: steps.enumerated().map { index, step in
                (
                    step.key,
                    CompletedStep(serverID: Int64(100 + index), contentDigest: step.contentDigest, doneAt: Date())
                )
            })
    }

    @Test("the references of every record are checked once, before anything is recorded or sent")
    func referencesAreCheckedFirst() {
        var state = Self.fresh(checksReferences: true)
        let (trace, finish) = Self.drive(&state)
        #expect(finish == .done)
        let everyUse = Self.plan.steps.flatMap(\.references).map(\.field)
        #expect(everyUse.contains("session.rifleSetupId") && everyUse.contains("chrono[0].ammunitionId"))
        #expect(trace.first == "check \(everyUse.joined(separator: ","))")
        #expect(trace.filter { $0.hasPrefix("check") }.count == 1)
    }

    @Test("a resumed bundle: only the references of records not yet on the server are checked; none left, no check")
    func resumedBundleChecksOnlyWhatIsLeft() {
        let steps = Self.plan.steps
        var resumed = Self.fresh(completed: Self.done(steps.prefix(2)), checksReferences: true)
        let (trace, _) = Self.drive(&resumed)
        let left = steps.dropFirst(2).flatMap(\.references).map(\.field)
        #expect(!left.isEmpty && !left.contains("session.rifleSetupId"))
        #expect(trace.first == "check \(left.joined(separator: ","))")

        let withReferences = steps.lastIndex { !$0.references.isEmpty }!
        var nearlyDone = Self.fresh(completed: Self.done(steps[...withReferences]), checksReferences: true)
        let (quiet, finish) = Self.drive(&nearlyDone)
        #expect(finish == .done)
        #expect(!quiet.contains { $0.hasPrefix("check") })
    }

    @Test("an id the lists do not hold fails the bundle with its field before anything is recorded or sent")
    func unknownReferenceFailsFirst() {
        var state = Self.fresh(checksReferences: true)
        var script = Script()
        script.references = { uses in .unknown(uses.first { $0.field == "chrono[0].ammunitionId" }!) }
        let (trace, finish) = Self.drive(&state, script)
        #expect(trace.count == 1)
        guard case .fail(let failure, let stepAnswered) = finish else {
            Issue.record("expected a failure, got \(finish)")
            return
        }
        #expect(!stepAnswered)
        #expect(failure.reason == .unknownReference && failure.field == "chrono[0].ammunitionId" && failure.step == nil)
        #expect(failure.message?.contains("ammunition 2 ") == true, "\(failure.message ?? "")")
        #expect(failure.message?.contains("chronoSessions[0].ammunitionId") == true)
        #expect(failure.message?.contains("Nothing of this bundle was sent.") == true)

        // A resumed bundle, its session and first entries already sent: not "nothing was sent".
        var resumed = Self.fresh(completed: Self.done(Self.plan.steps.prefix(2)), checksReferences: true)
        guard case .fail(let again, _) = Self.drive(&resumed, script).finish else {
            Issue.record("expected a failure")
            return
        }
        #expect(
            again.message?.contains("Nothing more of this bundle was sent; 2 of its records are already on the server")
                == true, "\(again.message ?? "")")
    }

    @Test("a list that cannot be read is the API's failure: a 5xx or no answer defers, 401 and a stop give back")
    func unreadableListNeverBlamesTheBundle() {
        func finish(_ response: StepResponse, stopping: Bool = false) -> BundleUploadState.Finish {
            var state = Self.fresh(checksReferences: true)
            guard case .checkReferences = state.start(stopping: false) else { return .done }
            guard
                case .finish(let finish) = state.referencesChecked(
                    .listUnreadable(.ammunition, response), stopping: stopping)
            else { return .done }
            return finish
        }
        guard
            case .deferBundle(let failure, answered: true) = finish(
                .retryable(status: 503, retryAfter: nil, message: "down"))
        else {
            Issue.record("a 503 defers")
            return
        }
        #expect(failure.reason == .http(503) && failure.message?.contains("GET /api/ammunition") == true)
        guard
            case .deferBundle(let unreachable, answered: false) = finish(
                .retryable(status: nil, retryAfter: nil, message: "refused"))
        else {
            Issue.record("no answer defers, unanswered")
            return
        }
        #expect(unreachable.reason == .unreachable)
        #expect(
            finish(.unauthorized(status: 401, message: "no"))
                == .giveBack(.credentialsRefused(status: 401, message: "no")))
        #expect(finish(.misdirected(message: "html")) == .giveBack(.apiMisdirected(message: "html")))
        #expect(
            finish(.retryable(status: 503, retryAfter: nil, message: "down"), stopping: true) == .giveBack(.stopping))
    }

    @Test(
        "the clean path: one intents commit, every step sent once in plan order, each result settled two steps later (its commit overlaps their requests)"
    )
    func cleanPath() {
        var state = Self.fresh()
        let (trace, finish) = Self.drive(&state)
        #expect(finish == .done)
        let keys = Self.keys
        var expected = ["look session", "send session", "hand in session=1"]
        for (index, key) in keys.enumerated().dropFirst() {
            // Two results at most are not settled: the third waits for the first.
            expected += ["send \(key)"] + (index >= 2 ? ["settle \(keys[index - 2])"] : [])
            expected.append("hand in \(key)=\(index + 1)")
        }
        expected += ["settle \(keys[keys.count - 2])", "settle \(keys.last!)"]
        #expect(trace.filter { !$0.hasPrefix("intents") } == expected)
        // Every step's intent in the first commit, before the session is created: an intent names
        // its parents by step key, not by the server ids they will get. Each before its step is sent.
        let intents = trace.filter { $0.hasPrefix("intents") }
        #expect(intents == ["intents " + keys.joined(separator: ",")])
        for key in keys {
            #expect(
                trace.firstIndex { $0.hasPrefix("intents") && $0.contains(key) }! < trace.firstIndex {
                    $0.hasPrefix("send \(key)")
                }!)
        }
        #expect(state.serverIDs.count == keys.count)
    }

    @Test(
        "a resumed bundle: steps already done are skipped (their ids fill in the paths), nothing of them is sent or recorded"
    )
    func resumedBundleSkipsDoneSteps() {
        let keys = Self.keys
        let done = Dictionary(
            uniqueKeysWithValues: Self.plan.steps.prefix(3).enumerated().map { index, step in
                (
                    step.key,
                    CompletedStep(serverID: Int64(100 + index), contentDigest: step.contentDigest, doneAt: Date())
                )
            })
        var state = Self.fresh(completed: done)
        let (trace, finish) = Self.drive(&state)
        #expect(finish == .done)
        #expect(trace.first == "intents " + keys[3...].joined(separator: ","), "the steps not done, in one commit")
        #expect(trace.dropFirst().first == "send \(keys[3])", "not looked for: its request was never sent before")
        #expect(!trace.contains { $0.hasPrefix("send session") || $0.hasPrefix("send \(keys[1])") })
        #expect(state.serverIDs["session"] == 100)
    }

    @Test(
        "a step done meanwhile by another bundle of the session is not sent; done with other content, the bundle fails naming the step"
    )
    func doneMeanwhile() {
        let keys = Self.keys
        let dope = Self.plan.steps[1]
        var script = Script()
        script.intentOutcomes = { intents in
            intents.map {
                $0.stepKey == dope.key
                    ? .alreadyDone(CompletedStep(serverID: 55, contentDigest: dope.contentDigest, doneAt: Date()))
                    : .recorded
            }
        }
        var state = Self.fresh()
        var (trace, finish) = Self.drive(&state, script)
        #expect(finish == .done)
        #expect(!trace.contains("send \(dope.key)"))
        #expect(state.serverIDs[dope.key] == 55)

        script.intentOutcomes = { intents in
            intents.map {
                $0.stepKey == dope.key
                    ? .alreadyDone(CompletedStep(serverID: 55, contentDigest: "other", doneAt: Date())) : .recorded
            }
        }
        state = Self.fresh()
        (trace, finish) = Self.drive(&state, script)
        guard case .fail(let failure, stepAnswered: false) = finish else {
            Issue.record("expected a failure, got \(finish)")
            return
        }
        #expect(failure.reason == .changedAfterUpload && failure.step == dope.key)
        // The store keeps a digest, not the fields: the record is named, and where to compare it.
        #expect(failure.field == dope.recordPath && !dope.recordPath.isEmpty)
        #expect(
            failure.message?.contains("\(dope.recordPath) was uploaded before as record 55") == true,
            "\(failure.message ?? "")")
        #expect(failure.message?.contains("GET /api/sessions/") == true, "\(failure.message ?? "")")
        #expect(trace.last == "settle session", "the session's result settled before the bundle moves")
        #expect(!trace.contains { $0.hasPrefix("send \(keys[2])") })
    }

    @Test(
        "intents an earlier process recorded make their steps ambiguous: looked for first, one read of the tree serving the first look of each"
    )
    func resentIntentsAreLookedUpFirst() throws {
        let (first, second) = (Self.plan.steps[3], Self.plan.steps[4])
        var script = Script()
        script.intentOutcomes = { intents in
            intents.map {
                [first.key, second.key].contains($0.stepKey) ? .resent(previousFingerprint: "f") : .recorded
            }
        }
        let sessionOnly = try Self.tree([(Self.plan.steps[0], 1)])
        script.look = { step, target in
            step.kind == .session
                ? .tree(nil) : (target == .sessionTree(serverID: 1) ? .tree(sessionOnly) : .unavailable)
        }
        var state = Self.fresh()
        let (trace, finish) = Self.drive(&state, script)
        #expect(finish == .done)
        #expect(trace.filter { $0.hasPrefix("look") } == ["look session", "look \(first.key)"], "\(trace)")
        #expect(trace.contains("send \(first.key)") && trace.contains("send \(second.key)"))
    }

    @Test("a stop: the result on its way is settled, nothing more is sent, the bundle goes back uncounted")
    func stopGivesBack() {
        var script = Script()
        script.stopping = { sent in sent >= 2 }
        var state = Self.fresh()
        let (trace, finish) = Self.drive(&state, script)
        #expect(finish == .giveBack(.stopping))
        #expect(trace.filter { $0.hasPrefix("send") }.count == 2)
        #expect(trace.last == "settle \(Self.keys[1])")
    }

    @Test("a stop whose grace cut the step's last try short gives the bundle back uncounted, not deferred")
    func aStopOnTheLastTryGivesBack() {
        let chrono = Self.plan.steps[2]
        let attempts = RetryPolicy().attempts
        var script = Script()
        let normal = script.answer
        script.answer = { step in
            step.key == chrono.key
                ? .retryable(status: nil, retryAfter: nil, message: "cancelled after its grace") : normal(step)
        }
        // Stopping from the step's last try on (two steps before it, one send each).
        script.stopping = { sent in sent >= 2 + attempts }
        var state = Self.fresh()
        let (trace, finish) = Self.drive(&state, script)
        #expect(trace.filter { $0 == "send \(chrono.key)" }.count == attempts, "\(trace)")
        #expect(finish == .giveBack(.stopping))
    }

    @Test(
        "answers decide: 422 fails, 401 gives back, no answer defers (unreachable), retries cut short by a stop give back"
    )
    func answersDecide() {
        let chrono = Self.plan.steps[2]
        func finish(answering response: StepResponse, cutShort: Bool = false) -> (
            trace: [String], finish: BundleUploadState.Finish
        ) {
            var script = Script()
            let normal = script.answer
            script.answer = { step in step.key == chrono.key ? response : normal(step) }
            if cutShort { script.backOff = .cancelled }
            var state = Self.fresh()
            return Self.drive(&state, script)
        }
        let rejected = finish(
            answering: .rejected(
                status: 422, code: "validation_failed", message: "velocity: too fast", field: "velocity"))
        #expect(
            rejected.finish
                == .fail(
                    BundleFailure(
                        reason: .http(422), step: chrono.key, httpStatus: 422, field: "chrono[0].velocity",
                        message: "velocity: too fast"),
                    stepAnswered: true))
        #expect(
            Array(rejected.trace.suffix(2)) == ["settle session", "settle \(Self.keys[1])"],
            "the results before it settled first")
        #expect(
            finish(answering: .unauthorized(status: 401, message: "bad token")).finish
                == .giveBack(.credentialsRefused(status: 401, message: "bad token")))
        #expect(
            finish(answering: .retryable(status: nil, retryAfter: nil, message: "timed out")).finish
                == .deferBundle(
                    BundleFailure(reason: .unreachable, step: chrono.key, message: "timed out"), answered: false))
        #expect(
            finish(answering: .retryable(status: 503, retryAfter: nil, message: "busy")).finish
                == .deferBundle(
                    BundleFailure(reason: .http(503), step: chrono.key, httpStatus: 503, message: "busy"),
                    answered: true))
        #expect(
            finish(answering: .retryable(status: 503, retryAfter: nil, message: "busy"), cutShort: true).finish
                == .giveBack(.stopping))
        #expect(
            finish(answering: .imageUnreadable(message: "gone")).finish
                == .fail(
                    BundleFailure(reason: .changedAfterValidation, step: chrono.key, message: "gone"),
                    stepAnswered: false))
        // The disk failing under the image is this machine's fault: deferred, not failed, and
        // kept from the circuit breaker (`deferLocally`, not `deferBundle`).
        let diskFault = finish(answering: .bundleReadFailed(message: "Input/output error")).finish
        guard case .deferLocally(let failure) = diskFault else {
            Issue.record("a disk fault ends as \(String(describing: diskFault))")
            return
        }
        #expect(failure.reason == FailureReason(.io) && failure.step == chrono.key)
        #expect(failure.message?.contains("not of the bundle: Input/output error") == true, "\(failure)")
    }

    @Test("an image that cannot be read back: an I/O error is the machine's, other bytes than validated the bundle's")
    func whoseFaultAnUnreadableImageIs() {
        let io = BundleError(.io, culprit: "images/t.jpg", message: "read failed: Input/output error")
        #expect(APIClient.unreadable(io) == .bundleReadFailed(message: io.description))
        let rewritten = BundleError(.changedAfterValidation, culprit: "images/t.jpg", message: "sha256 differs")
        #expect(APIClient.unreadable(rewritten) == .imageUnreadable(message: rewritten.description))
    }

    @Test(
        "after an unknown outcome the step is looked for: found, its id is handed in and it is not sent again; found with other content, the bundle fails"
    )
    func foundOnServer() throws {
        let dope = Self.plan.steps[1]
        var script = Script()
        let normal = script.answer
        script.answer = { step in
            step.key == dope.key ? .retryable(status: 500, retryAfter: nil, message: "oops") : normal(step)
        }
        let there = try Self.tree([(Self.plan.steps[0], 1), (dope, 900)])
        script.look = { step, _ in step.kind == .session ? .tree(nil) : .tree(there) }
        var state = Self.fresh()
        var (trace, finish) = Self.drive(&state, script)
        #expect(finish == .done)
        #expect(
            Array(trace.drop { $0 != "send \(dope.key)" }.prefix(4)) == [
                "send \(dope.key)", "back off \(dope.key) 1", "look \(dope.key)", "hand in \(dope.key)=900 (found)",
            ], "\(trace)")
        #expect(trace.contains("hand in \(dope.key)=900 (found)"))
        #expect(trace.filter { $0 == "send \(dope.key)" }.count == 1)
        #expect(state.serverIDs[dope.key] == 900)

        let other = try Self.tree([(Self.plan.steps[0], 1), (dope, 900)], distance: 999)
        script.look = { step, _ in step.kind == .session ? .tree(nil) : .tree(other) }
        state = Self.fresh()
        (trace, finish) = Self.drive(&state, script)
        guard case .fail(let failure, stepAnswered: true) = finish else {
            Issue.record("expected a failure, got \(finish)")
            return
        }
        #expect(failure.reason == .changedAfterUpload && failure.step == dope.key)
        #expect(failure.message?.contains("distance = 999") == true, "\(failure.message ?? "")")
        #expect(failure.field == "\(dope.recordPath).distance" && !dope.recordPath.isEmpty)
    }

    @Test(
        "looks only when the outcome is unknown: a 429 is sent again without one, a 500 or no answer is looked for before each retry"
    )
    func looksOnlyWhenTheOutcomeIsUnknown() {
        let chrono = Self.plan.steps[2]
        func trace(_ response: StepResponse) -> [String] {
            var script = Script()
            let normal = script.answer
            script.answer = { step in step.key == chrono.key ? response : normal(step) }
            var state = Self.fresh()
            return Self.drive(&state, script).trace.filter {
                $0.hasSuffix(chrono.key) || $0.contains(" \(chrono.key) ")
            }
        }
        let attempts = RetryPolicy().attempts
        let rateLimited = trace(.retryable(status: 429, retryAfter: .zero, message: "slow down"))
        #expect(rateLimited.filter { $0.hasPrefix("send") }.count == attempts)
        #expect(!rateLimited.contains { $0.hasPrefix("look") }, "\(rateLimited)")
        for unknown in [
            StepResponse.retryable(status: 500, retryAfter: nil, message: "oops"),
            .retryable(status: nil, retryAfter: nil, message: "reset"),
        ] {
            let looked = trace(unknown)
            #expect(looked.filter { $0.hasPrefix("look") }.count == attempts - 1, "\(looked)")
            #expect(looked.last?.hasPrefix("back off") == false)
        }
    }

    @Test("a refused credential is read again once: renewed, the step is sent again at once; not, the bundle goes back")
    func refusedCredentialIsReadAgainOnce() {
        let dope = Self.plan.steps[1]
        var refusals = 0
        var script = Script()
        let normal = script.answer
        script.renews = true
        script.answer = { step in
            guard step.key == dope.key, refusals == 0 else { return normal(step) }
            refusals += 1
            return .unauthorized(status: 401, message: "expired")
        }
        var state = Self.fresh()
        let (trace, finish) = Self.drive(&state, script)
        #expect(finish == .done)
        #expect(
            Array(trace.drop { $0 != "send \(dope.key)" }.prefix(3)) == [
                "send \(dope.key)", "renew credential", "send \(dope.key)",
            ])

        script.answer = { step in step.key == dope.key ? .unauthorized(status: 403, message: "no") : normal(step) }
        var again = Self.fresh()
        let (refused, end) = Self.drive(&again, script)
        #expect(end == .giveBack(.credentialsRefused(status: 403, message: "no")))
        #expect(refused.filter { $0 == "renew credential" }.count == 1)
        #expect(refused.filter { $0 == "check token" }.count == 1, "the token is checked alone before the run stops")
    }

    @Test(
        "a refusal that stands while the API takes the token for a request of its own is the bundle's: deferred as http_403"
    )
    func aRefusalOfTheBundleAloneDefersIt() {
        let dope = Self.plan.steps[1]
        var script = Script()
        let normal = script.answer
        script.tokenVerdict = .bundles
        script.answer = { step in
            step.key == dope.key ? .unauthorized(status: 403, message: "<html>blocked</html>") : normal(step)
        }
        var state = Self.fresh()
        let (trace, finish) = Self.drive(&state, script)
        guard case .deferBundle(let failure, answered: true) = finish else {
            Issue.record("deferred, answered: \(finish)")
            return
        }
        #expect(failure.reason == .http(403) && failure.step == dope.key && failure.httpStatus == 403)
        #expect(failure.message?.contains("the refusal is the bundle's") == true, "\(failure.message ?? "")")
        #expect(
            Array(trace.drop { $0 != "send \(dope.key)" }) == [
                "send \(dope.key)", "renew credential", "check token", "settle session",
            ])

        // The API could not say whether it takes the token (a 503 there): back uncounted, no one blamed.
        script.tokenVerdict = .undecided("HTTP 503: busy")
        var undecided = Self.fresh()
        #expect(
            Self.drive(&undecided, script).finish
                == .giveBack(.tokenUndecided(status: 403, message: "<html>blocked</html>; HTTP 503: busy")))
    }

    @Test(
        "a session already on the server (no checkpoint): the look records what is there as found, and none of it is sent"
    )
    func sessionLookReconciles() throws {
        let there = try Self.tree([(Self.plan.steps[0], 1), (Self.plan.steps[1], 2)])
        var script = Script()
        script.look = { _, _ in .tree(there) }
        var state = Self.fresh()
        let (trace, finish) = Self.drive(&state, script)
        #expect(finish == .done)
        #expect(
            Array(trace.prefix(3)) == [
                "intents " + Self.keys.joined(separator: ","), "look session", "record found session,\(Self.keys[1])",
            ])
        #expect(!trace.contains { $0 == "send session" || $0 == "send \(Self.keys[1])" })
        #expect(state.serverIDs["session"] == 1 && state.serverIDs[Self.keys[1]] == 2)
    }

    @Test(
        "checkpoints that fail: a result that cannot be committed, or intents, give the bundle back and nothing more is sent"
    )
    func checkpointFailures() {
        var script = Script()
        script.settles = { key in key != Self.keys[2] }
        var state = Self.fresh()
        var (trace, finish) = Self.drive(&state, script)
        #expect(finish == .giveBack(.checkpointFailed))
        #expect(
            Array(trace.suffix(2)) == ["settle \(Self.keys[2])", "settle \(Self.keys[3])"],
            "the result after it is settled too before the bundle goes back")
        #expect(
            trace.filter { $0.hasPrefix("send") }.count == 5,
            "the two steps after it were on the wire, then nothing more")

        script = Script()
        script.intentOutcomes = { _ in nil }
        state = Self.fresh()
        (trace, finish) = Self.drive(&state, script)
        #expect(finish == .giveBack(.checkpointFailed))
        #expect(trace == ["intents " + Self.keys.joined(separator: ",")])
    }

    @Test(
        "a session found on the server with no checkpoint: its steps there are recorded as found, in plan order, and skipped"
    )
    func reconciliationSkipsWhatTheServerHas() throws {
        // The server holds the session and its DOPE entry (ids 1, 2), nothing else.
        let stored = Self.plan.steps.prefix(2)
        let tree = try #require(
            ServerTree(
                json: Array(
                    try JSONSerialization.data(
                        withJSONObject: [
                            "id": 1, "clientId": Self.plan.sessionID,
                            "dope": [
                                (try JSONSerialization.jsonObject(with: Data(Self.jsonBody(stored.last!)))
                                    as! [String: Any]).merging(["id": 2]) { $1 }
                            ],
                        ].merging(
                            try JSONSerialization.jsonObject(with: Data(Self.jsonBody(stored.first!))) as! [String: Any]
                        ) { old, _ in old }))))
        // The session's look, after the first intents commit, finds them.
        var state = Self.fresh()
        guard case .recordIntents(let intents) = state.start(stopping: false),
            case .lookUp(_, .sessionByClientID) = state.intentsRecorded(intents.map { _ in .recorded }, stopping: false),
            case .recordFound(let found) = state.looked(.tree(tree), stopping: false)
        else {
            Issue.record("expected the session looked for, then steps found")
            return
        }
        #expect(found.map(\.intent.stepKey) == stored.map(\.key))
        #expect(found.map(\.serverID) == [1, 2])
        let next = state.foundRecorded(Self.recorded(found), stopping: false)
        let (trace, finish) = Self.drive(&state, from: next)
        #expect(finish == .done)
        #expect(trace.first == "send \(Self.keys[2])", "the first step not found, its intent already committed")
        #expect(!trace.contains { $0.hasPrefix("send session") || $0.hasPrefix("send \(Self.keys[1])") })
        #expect(state.serverIDs["session"] == 1 && state.serverIDs[Self.keys[1]] == 2)
    }

    @Test("steps found on the server that cannot be recorded as done give the bundle back, and nothing is sent")
    func foundStepsNotRecordedGiveBack() throws {
        var script = Script()
        let there = try Self.tree([(Self.plan.steps[0], 1), (Self.plan.steps[1], 2)])
        script.look = { _, _ in .tree(there) }
        script.recordsFound = false
        var state = Self.fresh()
        let (trace, finish) = Self.drive(&state, script)
        #expect(finish == .giveBack(.checkpointFailed))
        #expect(trace.last == "record found session,\(Self.keys[1])")
        #expect(!trace.contains { $0.hasPrefix("send") })
    }

    @Test(
        "a look that fails is a failed try: backed off and looked at again, never sent on a guess; the last one defers")
    func aFailedLookIsAFailedTry() {
        let dope = Self.plan.steps[1]
        var script = Script()
        let normal = script.answer
        script.answer = { step in
            step.key == dope.key ? .retryable(status: 500, retryAfter: nil, message: "oops") : normal(step)
        }
        script.look = { step, _ in
            step.kind == .session ? .tree(nil) : .failed(.retryable(status: 503, retryAfter: nil, message: "busy"))
        }
        var state = Self.fresh()
        let (trace, finish) = Self.drive(&state, script)
        let attempts = RetryPolicy().attempts
        #expect(trace.filter { $0 == "send \(dope.key)" }.count == 1, "\(trace)")
        #expect(trace.filter { $0 == "look \(dope.key)" }.count == attempts - 1)
        #expect(
            finish
                == .deferBundle(
                    BundleFailure(reason: .http(503), step: dope.key, httpStatus: 503, message: "busy"), answered: true)
        )
    }

    @Test("a Retry-After longer than a slot may be held is not waited for: the bundle is deferred with that answer")
    func aDeclinedBackOffDefers() {
        let chrono = Self.plan.steps[2]
        var script = Script()
        let normal = script.answer
        script.answer = { step in
            step.key == chrono.key ? .retryable(status: 503, retryAfter: .seconds(600), message: "later") : normal(step)
        }
        script.backOff = .declined
        var state = Self.fresh()
        let (trace, finish) = Self.drive(&state, script)
        #expect(trace.filter { $0 == "send \(chrono.key)" }.count == 1, "\(trace)")
        #expect(
            finish
                == .deferBundle(
                    BundleFailure(reason: .http(503), step: chrono.key, httpStatus: 503, message: "later"),
                    answered: true))
    }

    /// A session tree as the API shows it, holding these records (the session first, then DOPE
    /// entries), each with its bundle content and the given server id; `distance` overrides the
    /// DOPE entries' distance.
    static func tree(_ records: [(UploadStep, Int64)], distance: Int? = nil) throws -> ServerTree {
        func object(_ step: UploadStep, _ id: Int64) throws -> [String: Any] {
            var object = try JSONSerialization.jsonObject(with: Data(jsonBody(step))) as! [String: Any]
            object["id"] = id
            if let distance, step.kind == .dope { object["distance"] = distance }
            return object
        }
        var session = try object(records[0].0, records[0].1)
        session["dope"] = try records.dropFirst().map { try object($0.0, $0.1) }
        return try #require(ServerTree(json: Array(try JSONSerialization.data(withJSONObject: session))))
    }

    static func jsonBody(_ step: UploadStep) -> [UInt8] {
        guard case .json(let bytes) = step.payload else { preconditionFailure("a JSON step") }
        return bytes
    }
}
