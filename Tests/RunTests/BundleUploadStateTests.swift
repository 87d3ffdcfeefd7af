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
        return UploadPlan(session: document, images: [:])
    }()
    static var keys: [String] { plan.steps.map(\.key) }

    /// What the world answers, per action; each defaults to "all went well".
    struct Script {
        var intentOutcomes: ([CheckpointStore.StepIntent]) -> [StepIntentOutcome]? = { $0.map { _ in .recorded } }
        var answer: (UploadStep, _ lookFirst: Bool) -> BundleUploadState.Resolution = { step, _ in
            .response(
                .created(id: Int64(BundleUploadStateTests.keys.firstIndex(of: step.key)! + 1), replayed: false),
                cutShort: false)
        }
        var settles: (_ stepKey: String) -> Bool = { _ in true }
        var references: ([ReferenceUse]) -> ReferenceCatalog.Check = { _ in .passed }
        var stopping: (_ sent: Int) -> Bool = { _ in false }
    }

    /// Drives `state` with `script` to the end. Returns the trace (one line per action) and where the bundle went.
    static func drive(
        _ state: inout BundleUploadState, _ script: Script = Script()
    ) -> (trace: [String], finish: BundleUploadState.Finish) {
        var trace: [String] = []
        var sent = 0
        var lastHandedIn: String? = nil
        var action = state.start(stopping: script.stopping(0))
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
            case .send(let step, _, let lookFirst):
                trace.append("send \(step.key)\(lookFirst ? " (look first)" : "")")
                sent += 1
                action = state.resolved(script.answer(step, lookFirst), stopping: script.stopping(sent))
            case .handInResult(let result):
                trace.append("hand in \(result.stepKey)=\(result.serverID)")
                lastHandedIn = result.stepKey
                action = state.resultHandedIn(stopping: script.stopping(sent))
            case .settleResult:
                trace.append("settle \(lastHandedIn!)")
                action = state.settled(committed: script.settles(lastHandedIn!), stopping: script.stopping(sent))
            case .finish(let finish):
                return (trace, finish)
            }
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
        "the clean path: one intents commit, every step sent once in plan order, each result settled while the next step is on the wire"
    )
    func cleanPath() {
        var state = Self.fresh()
        let (trace, finish) = Self.drive(&state)
        #expect(finish == .done)
        let keys = Self.keys
        var expected = ["send session (look first)", "hand in session=1"]
        for (index, key) in keys.enumerated().dropFirst() {
            // The next step is sent before the last result is settled: the commit overlaps the request.
            expected += ["send \(key)", "settle \(keys[index - 1])", "hand in \(key)=\(index + 1)"]
        }
        expected.append("settle \(keys.last!)")
        #expect(trace.filter { !$0.hasPrefix("intents") } == expected)
        // Intents go ahead as far as the requests are known: a level of the tree at a time (a
        // child's path needs its parent's server id), each step's before it is sent, once.
        let intents = trace.filter { $0.hasPrefix("intents") }
        #expect(
            intents == [
                "intents session", "intents \(keys[1]),\(keys[2])", "intents \(keys[3]),\(keys[4]),\(keys[5])",
                "intents \(keys[6])",
            ])
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
        #expect(
            trace.first == "intents \(keys[3]),\(keys[4]),\(keys[5])",
            "the readings and the group: their parents' ids are known")
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
        #expect(trace.last == "settle session", "the session's result settled before the bundle moves")
        #expect(!trace.contains { $0.hasPrefix("send \(keys[2])") })
    }

    @Test("an intent an earlier process recorded makes its step ambiguous: looked for on the server first, once")
    func resentIntentsAreLookedUpFirst() {
        let reading = Self.plan.steps[3]
        var script = Script()
        script.intentOutcomes = { intents in
            intents.map { $0.stepKey == reading.key ? .resent(previousFingerprint: "f") : .recorded }
        }
        var state = Self.fresh()
        let (trace, finish) = Self.drive(&state, script)
        #expect(finish == .done)
        #expect(trace.contains("send \(reading.key) (look first)"))
        #expect(trace.filter { $0.hasSuffix("(look first)") }.count == 2, "the session and that step only: \(trace)")
        let first = state.takeAmbiguousBefore(reading.key)
        let second = state.takeAmbiguousBefore(reading.key)
        #expect(first, "its first look may use the tree read for all of them")
        #expect(!second, "only once")
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
            script.answer = { step, look in
                step.key == chrono.key ? .response(response, cutShort: cutShort) : normal(step, look)
            }
            var state = Self.fresh()
            return Self.drive(&state, script)
        }
        let rejected = finish(
            answering: .rejected(status: 422, code: "validation_failed", message: "velocity: too fast"))
        #expect(
            rejected.finish
                == .fail(
                    BundleFailure(reason: .http(422), step: chrono.key, httpStatus: 422, message: "velocity: too fast"),
                    stepAnswered: true))
        #expect(rejected.trace.last == "settle \(Self.keys[1])", "the result before it settled first")
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
    }

    @Test(
        "a step found on the server is recorded with that id and not sent; one found with other content fails the bundle"
    )
    func foundOnServer() {
        var script = Script()
        let normal = script.answer
        script.answer = { step, look in step.key == Self.keys[1] ? .found(900) : normal(step, look) }
        var state = Self.fresh()
        var (trace, finish) = Self.drive(&state, script)
        #expect(finish == .done)
        #expect(trace.contains("hand in \(Self.keys[1])=900"))
        #expect(state.serverIDs[Self.keys[1]] == 900)

        let differs = BundleFailure(reason: .changedAfterUpload, step: Self.keys[1], message: "other")
        script.answer = { step, look in step.key == Self.keys[1] ? .differs(differs) : normal(step, look) }
        state = Self.fresh()
        (trace, finish) = Self.drive(&state, script)
        #expect(finish == .fail(differs, stepAnswered: true))
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
        #expect(trace.last == "settle \(Self.keys[2])")
        #expect(
            trace.filter { $0.hasPrefix("send") }.count == 4, "the step after it was on the wire, then nothing more")

        script = Script()
        script.intentOutcomes = { _ in nil }
        state = Self.fresh()
        (trace, finish) = Self.drive(&state, script)
        #expect(finish == .giveBack(.checkpointFailed))
        #expect(trace == ["intents session"])
    }

    @Test(
        "a session found on the server with no checkpoint: its steps there are recorded as found, in plan order, and skipped"
    )
    func reconciliationSkipsWhatTheServerHas() throws {
        var state = Self.fresh()
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
        guard case .found(let found) = state.reconciliation(with: tree) else {
            Issue.record("expected steps found")
            return
        }
        #expect(found.map(\.intent.stepKey) == stored.map(\.key))
        #expect(found.map(\.serverID) == [1, 2])
        state.foundOnServer(
            found.map {
                (
                    stepKey: $0.intent.stepKey,
                    done: CompletedStep(serverID: $0.serverID, contentDigest: $0.intent.contentDigest, doneAt: Date())
                )
            })
        let (trace, finish) = Self.drive(&state)
        #expect(finish == .done)
        #expect(trace.first == "intents \(Self.keys[2])", "the chrono session first: its readings need its id")
        #expect(!trace.contains { $0.hasPrefix("send session") || $0.hasPrefix("send \(Self.keys[1])") })
    }

    static func jsonBody(_ step: UploadStep) -> [UInt8] {
        guard case .json(let bytes) = step.payload else { preconditionFailure("a JSON step") }
        return bytes
    }
}
