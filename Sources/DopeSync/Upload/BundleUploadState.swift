/// The upload of one validated bundle, step by step, as a value that takes events and returns
/// actions. It never touches the database, the network or a clock, so every path through a
/// bundle (already done, done meanwhile by another bundle, found on the server, a stop, a
/// refusal, a checkpoint that fails) is tested on its own (`BundleUploadStateTests`).
/// ``BundleUploader`` carries the actions out and feeds back what happened, as AsyncHTTPClient's
/// `Transaction.StateMachine` and ``CircuitBreaker`` do.
///
/// The rules, in plan order for each step:
/// - a step already done is skipped (its server id fills in its children's paths); done with
///   other content, the bundle fails as `changed_after_upload`;
/// - a stop asked for gives the bundle back before the next step;
/// - a step's intent is committed before it is sent, with those of the next steps already known
///   (``BundleUploader/intentsAhead``); an intent recorded by an earlier process makes the step
///   ambiguous (looked for on the server first), and one done meanwhile is not sent;
/// - the session step is always looked for first, and a step whose request may have reached the
///   server (an intent of an earlier process, an answer that leaves the outcome unknown) before
///   it is sent again (``BundleUploadState+Tries``): lookups are actions, their answers events;
/// - a step's answer decides: created (its result is handed to the group commit), refused for
///   good (fail), refused credentials (read again once; refused again, the token is checked alone:
///   accepted there, the refusal is the bundle's and it is deferred, else it is given back and the
///   run stops), retryable (backed off and
///   tried again up to the policy's attempts, then defer, or give back when the run is stopping);
/// - at most ``unsettledResults`` results are handed in and not yet settled (known committed):
///   the oldest is settled before another answer is acted on, and every one before the bundle
///   goes anywhere; a result that cannot be committed gives the bundle back.
///
/// Its state is private and each phase holds what it acts on (``Phase``): the tries of a step
/// exist only while it is tried, a refusal only while the credential is read again or the token
/// checked, so no event finds data missing that its phase needs.
struct BundleUploadState {
    /// The bundle and how it is uploaded: fixed for its life, and read by the rules of every phase.
    let plan: UploadPlan
    let bundleName: String
    /// Whether the API is looked at before a step is sent again (``ServerLookup``); off: keys alone.
    let looksOnServer: Bool
    /// Tries of one step, the first included (``RetryPolicy/attempts``).
    let attemptsPerStep: Int
    private var phase: Phase

    /// - Parameters:
    ///   - completed: the session's steps already done, from the checkpoint database.
    ///   - checksReferences: whether the references of the records not yet on the server are
    ///     checked before the first request (``ReferenceCatalog``).
    init(
        plan: UploadPlan, bundleName: String, completed: [String: CompletedStep], checksReferences: Bool = true,
        looksOnServer: Bool = true, attemptsPerStep: Int = RetryPolicy().attempts
    ) {
        self.plan = plan
        self.bundleName = bundleName
        self.looksOnServer = looksOnServer
        self.attemptsPerStep = attemptsPerStep
        phase = .unstarted(Walk(completed: completed), checksReferences: checksReferences)
    }

    /// The server ids of the steps done so far (their records on the server), by step key.
    var serverIDs: [String: Int64] {
        if case .finished(let serverIDs) = phase { return serverIDs }
        return currentWalk.serverIDs
    }

    /// The tickets of the results handed in and not settled, oldest first: what a bundle whose
    /// claim ran out settles before it goes.
    var resultsNotSettled: [GroupCommit.Ticket] {
        if case .finished = phase { return [] }
        return currentWalk.unsettled
    }

    /// The walk of every phase but the end, read without taking it out.
    private var currentWalk: Walk {
        switch phase {
        case .unstarted(let walk, _), .checkingReferences(let walk), .recordingIntents(let walk, _),
            .looking(let walk, _, _), .recordingFound(let walk, _, _), .sending(let walk, _),
            .renewingCredential(let walk, _, _), .checkingToken(let walk, _), .backingOff(let walk, _, _, _),
            .handingIn(let walk), .settling(let walk, _):
            walk
        case .finished: preconditionFailure("a finished upload has no walk")
        case .modifying: preconditionFailure("no event reads the state while it handles another")
        }
    }

    // MARK: Events
    //
    // Each takes the walk out of its phase and leaves `.modifying` in its place, so the walk's
    // collections have one owner and change in place (AsyncHTTPClient's
    // `avoidingStateMachineCoW`): an event per request must not copy the plan's ledgers. The rule
    // it calls returns the next phase with the action, which ``enter(_:)`` puts in place.

    /// The first action: the reference check, when a record not yet on the server names an id.
    mutating func start(stopping: Bool) -> Action {
        guard case .unstarted(var walk, let checksReferences) = phase else { preconditionFailure("start once") }
        phase = .modifying
        // Only the records still to send: an id named only by records on the server is their past.
        let pending = plan.steps.filter { walk.completed[$0.key] == nil }.flatMap(\.references)
        guard checksReferences, !pending.isEmpty, !stopping else { return enter(advance(&walk, stopping: stopping)) }
        return enter((.checkingReferences(walk), .checkReferences(pending)))
    }

    /// What the server's lists said of the references (``Action/checkReferences(_:)``).
    mutating func referencesChecked(_ check: ReferenceCatalog.Check, stopping: Bool) -> Action {
        guard case .checkingReferences(var walk) = phase else {
            preconditionFailure("references checked only after checkReferences")
        }
        phase = .modifying
        return enter(afterReferences(check, &walk, stopping: stopping))
    }

    /// The intents were committed, with these outcomes (one per intent, in order).
    mutating func intentsRecorded(_ outcomes: [StepIntentOutcome], stopping: Bool) -> Action {
        guard case .recordingIntents(var walk, let keys) = phase, keys.count == outcomes.count else {
            preconditionFailure("intents recorded only after recordIntents, one outcome each")
        }
        phase = .modifying
        walk.intentsCommitted.formUnion(keys)
        for (key, outcome) in zip(keys, outcomes) {
            switch outcome {
            case .recorded: break
            case .resent: walk.ambiguousBefore.insert(key)
            // Done meanwhile by another bundle of the same session: not sent again.
            case .alreadyDone(let done): walk.completed[key] = done
            }
        }
        return enter(advance(&walk, stopping: stopping))
    }

    /// The intents, or the steps found on the server, could not be committed: nothing more is sent.
    mutating func checkpointFailed() -> Action {
        switch phase {
        case .recordingIntents(var walk, _), .recordingFound(var walk, _, _):
            phase = .modifying
            return enter(settleThen(.finish(.giveBack(.checkpointFailed)), &walk))
        default:
            preconditionFailure("checkpointFailed only after recordIntents or recordFound")
        }
    }

    /// What a look found (``Action/lookUp(_:_:)``).
    mutating func looked(_ found: ServerLookup.Found, stopping: Bool) -> Action {
        guard case .looking(var walk, let tries, let firstOfAmbiguousBefore) = phase else {
            preconditionFailure("looked only after lookUp")
        }
        phase = .modifying
        return enter(
            actOnLook(found, tries, firstOfAmbiguousBefore: firstOfAmbiguousBefore, &walk, stopping: stopping))
    }

    /// The steps of ``Action/recordFound(_:)`` were recorded as done.
    mutating func foundRecorded(_ recorded: [(stepKey: String, done: CompletedStep)], stopping: Bool) -> Action {
        guard case .recordingFound(var walk, let tries, let tree) = phase else {
            preconditionFailure("foundRecorded only after recordFound")
        }
        phase = .modifying
        for (key, done) in recorded { walk.completed[key] = done }
        walk.intentsCommitted.formUnion(recorded.map(\.stepKey))
        return enter(match(plan.steps[walk.index], in: tree, tries, &walk, stopping: stopping))
    }

    /// The API answered the step's request so (``Action/send(_:path:)``).
    mutating func answered(_ response: StepResponse, stopping: Bool) -> Action {
        guard case .sending(var walk, let tries) = phase else { preconditionFailure("answered only after send") }
        phase = .modifying
        return enter(actOnAnswer(response, tries, &walk, stopping: stopping))
    }

    /// Whether a credential other than the one refused could be read (``Action/renewCredential``).
    mutating func credentialRenewed(_ renewed: Bool, stopping: Bool) -> Action {
        guard case .renewingCredential(var walk, let tries, let refusal) = phase else {
            preconditionFailure("credentialRenewed only after renewCredential")
        }
        phase = .modifying
        guard renewed else {
            return enter((.checkingToken(walk, refusal: refusal), .checkToken(plan.steps[walk.index])))
        }
        // A refusal is no outcome: the send that follows needs no look.
        return enter(nextTry(tries, look: false, &walk, stopping: stopping))
    }

    /// Whether the API took the token for a request that needs nothing else (``Action/checkToken(_:)``).
    mutating func tokenChecked(_ verdict: APIClient.TokenVerdict, stopping: Bool) -> Action {
        guard case .checkingToken(var walk, let refusal) = phase else {
            preconditionFailure("tokenChecked only after checkToken")
        }
        phase = .modifying
        return enter(afterTokenCheck(verdict, refusal, &walk, stopping: stopping))
    }

    /// How the wait before a retry ended (``Action/backOff(_:retry:retryAfter:after:)``).
    mutating func backedOff(_ backOff: BackOff, stopping: Bool) -> Action {
        guard case .backingOff(var walk, let tries, let last, let lookFirst) = phase else {
            preconditionFailure("backedOff only after backOff")
        }
        phase = .modifying
        switch backOff {
        case .waited: return enter(nextTry(tries, look: lookFirst, &walk, stopping: stopping))
        case .declined: return enter(settleThen(.act(on: .response(last, cutShort: false)), &walk, stopping: stopping))
        case .cancelled: return enter(settleThen(.act(on: .response(last, cutShort: true)), &walk, stopping: stopping))
        }
    }

    /// The created step's result was handed to the group commit (``Action/handInResult(_:found:)``)
    /// under `ticket`.
    mutating func resultHandedIn(_ ticket: GroupCommit.Ticket, stopping: Bool) -> Action {
        guard case .handingIn(var walk) = phase else { preconditionFailure("resultHandedIn only after handInResult") }
        phase = .modifying
        walk.unsettled.append(ticket)
        walk.index += 1
        return enter(advance(&walk, stopping: stopping))
    }

    /// The oldest result not settled is committed (`committed`), or could not be.
    mutating func settled(committed: Bool, stopping: Bool) -> Action {
        guard case .settling(var walk, let then) = phase else { preconditionFailure("settled only after settleResult") }
        phase = .modifying
        walk.unsettled.removeFirst()
        // The server has that step; the deterministic key makes sending it again later harmless.
        // The results after it are settled too before the bundle goes back.
        guard committed else { return enter(settleThen(.finish(.giveBack(.checkpointFailed)), &walk)) }
        return enter(settleThen(then, &walk, stopping: stopping))
    }

    /// Puts the rule's next phase in place of `.modifying`; its action.
    private mutating func enter(_ next: Next) -> Action {
        phase = next.phase
        return next.action
    }
}

extension BundleUploadState {
    /// Where the upload is, each phase with the data its events need.
    enum Phase {
        /// Before ``BundleUploadState/start(stopping:)``.
        case unstarted(Walk, checksReferences: Bool)
        case checkingReferences(Walk)
        /// Committing the intents of the steps with these keys.
        case recordingIntents(Walk, keys: [String])
        /// Looking for the step on the server. `firstOfAmbiguousBefore`: the first look of a step
        /// an earlier process left ambiguous, whose tree serves the first look of the others.
        case looking(Walk, Tries, firstOfAmbiguousBefore: Bool)
        /// Recording what a look at this tree found, then matching the step against it.
        case recordingFound(Walk, Tries, tree: ServerTree)
        case sending(Walk, Tries)
        /// Reading the credential again after this refusal of the step.
        case renewingCredential(Walk, Tries, refusal: Refusal)
        /// Asking whether the API takes the token, the step refused so.
        case checkingToken(Walk, refusal: Refusal)
        /// Waiting before the step's next try. `last`: the answer retried; `lookFirst`: it left
        /// open whether the server created the record.
        case backingOff(Walk, Tries, last: StepResponse, lookFirst: Bool)
        case handingIn(Walk)
        /// Settling the oldest result handed in and not settled; then this.
        case settling(Walk, then: AfterSettle)
        /// The bundle's work is over; what it leaves is its steps' records on the server.
        case finished(serverIDs: [String: Int64])
        /// Only while an event is handled, its walk taken out (``BundleUploadState/enter(_:)``).
        case modifying
    }

    /// The walk through the plan, in every phase until the bundle goes somewhere: a step is
    /// skipped, looked for or handed in, and a result settled, from nearly any phase, and each
    /// needs what the steps before it left.
    struct Walk {
        /// The step being worked on: the first not done, in plan order.
        var index = 0
        /// The session's steps done: from the checkpoint database, then done meanwhile or found.
        var completed: [String: CompletedStep]
        /// Server ids by step key, of the steps done so far.
        var serverIDs: [String: Int64] = [:]
        var intentsCommitted: Set<String> = []
        /// Steps whose request may have reached the server before this run (an intent with no
        /// result): looked for on the server before they are sent.
        var ambiguousBefore: Set<String> = []
        /// The server's tree as first looked at for the steps an earlier process left ambiguous:
        /// one read serves the first look of each of them (nil: not read yet).
        var treeBefore: ServerTree? = nil
        /// The group commit's tickets of the results handed in and not yet settled, oldest first.
        var unsettled: [GroupCommit.Ticket] = []
    }

    /// The tries of the step being worked on (``BundleUploadState+Tries``).
    struct Tries {
        /// The step's request path, its parents' server ids filled in.
        let path: String
        /// Tries after the first.
        var retry = 0
        var renewedCredential = false
    }

    /// The API's refusal of the credentials (401, 403; not a proxy's 407).
    struct Refusal {
        let status: Int
        let message: String
        var response: StepResponse { .unauthorized(status: status, message: message) }
    }

    enum AfterSettle: Equatable {
        case finish(Finish)
        case act(on: Resolution)
    }

    /// A rule's outcome: the phase to enter, and the action it waits on.
    typealias Next = (phase: Phase, action: Action)

    /// How many of a bundle's results may be handed in and not yet settled: with two, a bundle
    /// rarely waits for a commit (its oldest result had two requests' time to commit, in a batch
    /// with the other bundles'), and the batches are fuller. A result waits for its commit at most
    /// the group commit's maximum delay either way (``GroupCommit``); a crash loses at most the
    /// results of the last few milliseconds, which the keys and the look on the server cover.
    static let unsettledResults = 2

    // MARK: Rules

    /// On to the next step not done; the end when there is none.
    func advance(_ walk: inout Walk, stopping: Bool) -> Next {
        while walk.index < plan.steps.count {
            let step = plan.steps[walk.index]
            if let done = walk.completed[step.key] {
                guard done.contentDigest == step.contentDigest else {
                    return settleThen(
                        .finish(.fail(Self.changedSinceUpload(step, done, walk), stepAnswered: false)), &walk)
                }
                walk.serverIDs[step.key] = done.serverID
                walk.index += 1
                continue
            }
            if stopping { return settleThen(.finish(.giveBack(.stopping)), &walk) }
            guard let path = step.path(serverIDs: walk.serverIDs) else {
                preconditionFailure("plan order guarantees the parent of \(step.key) is done first")
            }
            if !walk.intentsCommitted.contains(step.key) {
                let intents = intentsToRecord(walk)
                return (.recordingIntents(walk, keys: intents.map(\.stepKey)), .recordIntents(intents))
            }
            let lookFirst = step.kind == .session || walk.ambiguousBefore.contains(step.key)
            return nextTry(Tries(path: path), look: lookFirst && looksOnServer, &walk, stopping: stopping)
        }
        return settleThen(.finish(.done), &walk)
    }

    /// Acts on a step's resolution (the result before it is settled).
    func act(on resolution: Resolution, _ walk: inout Walk, stopping: Bool) -> Next {
        let step = plan.steps[walk.index]
        if let done = walk.completed[step.key] {  // found while reconciling (the session step itself)
            walk.serverIDs[step.key] = done.serverID
            walk.index += 1
            return advance(&walk, stopping: stopping)
        }
        let response: StepResponse
        let cutShort: Bool
        switch resolution {
        case .response(let answer, let stopped): (response, cutShort) = (answer, stopped)
        case .found(let id): (response, cutShort) = (.created(id: id, replayed: true), false)
        case .differs(let failure): return settleThen(.finish(.fail(failure, stepAnswered: true)), &walk)
        }
        guard case .created(let id, _) = response else {
            return settleThen(.finish(Self.finish(step, after: response, cutShort: cutShort)), &walk)
        }
        walk.serverIDs[step.key] = id
        return (
            .handingIn(walk),
            .handInResult(
                CheckpointStore.StepResult(sessionID: plan.sessionID, stepKey: step.key, serverID: id),
                found: resolution == .found(id))
        )
    }

    /// Settles the oldest pending result first if `then` must wait for it (a finish waits for
    /// every one, another answer for room under ``unsettledResults``), then goes on with `then`.
    func settleThen(_ then: AfterSettle, _ walk: inout Walk, stopping: Bool = false) -> Next {
        let mustSettle =
            switch then {
            case .finish: !walk.unsettled.isEmpty
            case .act: walk.unsettled.count >= Self.unsettledResults
            }
        guard mustSettle else {
            switch then {
            case .finish(let finish): return (.finished(serverIDs: walk.serverIDs), .finish(finish))
            case .act(let resolution): return act(on: resolution, &walk, stopping: stopping)
            }
        }
        return (.settling(walk, then: then), .settleResult(walk.unsettled[0]))
    }

    /// The intent a step is sent under. Its fingerprint names the request: the method, the path
    /// with its parents named by step key (their ids are in their own checkpoints), and the
    /// digest of what it says.
    func intent(of step: UploadStep) -> CheckpointStore.StepIntent {
        CheckpointStore.StepIntent(
            stepKey: step.key, idempotencyKey: step.idempotencyKey,
            requestFingerprint: "POST \(step.pathNamingParents) \(step.contentDigest)",
            contentDigest: step.contentDigest, bundleName: bundleName)
    }

    /// The intents of the walk's step and of the steps after it not done, at most
    /// ``BundleUploader/intentsAhead``: a bundle of 50 steps commits its intents twice, whether
    /// or not the parents of those steps are created yet.
    private func intentsToRecord(_ walk: Walk) -> [CheckpointStore.StepIntent] {
        Array(
            plan.steps[walk.index...].lazy.filter { walk.completed[$0.key] == nil }.prefix(BundleUploader.intentsAhead)
                .map(intent(of:)))
    }
}
