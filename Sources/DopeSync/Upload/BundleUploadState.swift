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
struct BundleUploadState {
    enum Phase: Equatable {
        case checkingReferences
        case stepping
        case recordingIntents([String])
        case looking
        /// Recording what a look at this tree found, then matching the step against it.
        case recordingFound(ServerTree)
        case sending
        case renewingCredential
        case checkingToken
        case backingOff
        case handingIn
        /// Settling the result handed in last; then this.
        case settling(then: AfterSettle)
        case finished
    }

    enum AfterSettle: Equatable {
        case finish(Finish)
        case act(on: Resolution)
    }

    /// The tries of the step being sent (``BundleUploadState+Tries``).
    struct Tries: Equatable {
        let path: String
        var retry = 0
        /// Look on the server before the next send.
        var mustLook: Bool
        var renewedCredential = false
        /// This look is the first of a step left ambiguous by an earlier process.
        var firstLookOfAmbiguousBefore = false
        /// The answer a renewal or a back-off follows.
        var last: StepResponse? = nil
    }

    let plan: UploadPlan
    let bundleName: String
    /// Whether the API is looked at before a step is sent again (``ServerLookup``); off: keys alone.
    let looksOnServer: Bool
    /// Tries of one step, the first included (``RetryPolicy/attempts``).
    let attemptsPerStep: Int
    var completed: [String: CompletedStep]
    /// Server ids by step key, of the steps done so far.
    private(set) var serverIDs: [String: Int64] = [:]
    var intentsCommitted: Set<String> = []
    /// Steps whose request may have reached the server before this run (an intent with no
    /// result): looked for on the server before they are sent.
    var ambiguousBefore: Set<String> = []
    /// The server's tree as first looked at for the steps an earlier process left ambiguous: one
    /// read serves the first look of each of them.
    var treeBefore: ServerTree? = nil
    var tries: Tries? = nil
    /// Results handed in and not yet settled.
    private(set) var resultsPending = 0
    private(set) var index = 0
    var phase = Phase.stepping

    /// Whether the references of the records not yet on the server are checked before the first
    /// request (``ReferenceCatalog``).
    let checksReferences: Bool

    /// - Parameter completed: the session's steps already done, from the checkpoint database.
    init(
        plan: UploadPlan, bundleName: String, completed: [String: CompletedStep], checksReferences: Bool = true,
        looksOnServer: Bool = true, attemptsPerStep: Int = RetryPolicy().attempts
    ) {
        self.plan = plan
        self.bundleName = bundleName
        self.completed = completed
        self.checksReferences = checksReferences
        self.looksOnServer = looksOnServer
        self.attemptsPerStep = attemptsPerStep
    }

    /// The first action: the reference check, when a record not yet on the server names an id.
    mutating func start(stopping: Bool) -> Action {
        precondition(phase == .stepping && index == 0, "start once")
        // Only the records still to send: an id named only by records on the server is their past.
        let pending = plan.steps.filter { completed[$0.key] == nil }.flatMap(\.references)
        guard checksReferences, !pending.isEmpty, !stopping else { return advance(stopping: stopping) }
        phase = .checkingReferences
        return .checkReferences(pending)
    }

    /// The intents were committed, with these outcomes (one per intent, in order).
    mutating func intentsRecorded(_ outcomes: [StepIntentOutcome], stopping: Bool) -> Action {
        guard case .recordingIntents(let keys) = phase, keys.count == outcomes.count else {
            preconditionFailure("intents recorded only after recordIntents, one outcome each")
        }
        intentsCommitted.formUnion(keys)
        for (key, outcome) in zip(keys, outcomes) {
            switch outcome {
            case .recorded: break
            case .resent: ambiguousBefore.insert(key)
            // Done meanwhile by another bundle of the same session: not sent again.
            case .alreadyDone(let done): completed[key] = done
            }
        }
        phase = .stepping
        return advance(stopping: stopping)
    }

    /// The intents, or the steps found on the server, could not be committed: nothing more is sent.
    mutating func checkpointFailed() -> Action {
        switch phase {
        case .recordingIntents, .recordingFound: return settleThen(.finish(.giveBack(.checkpointFailed)))
        default: preconditionFailure("checkpointFailed only after recordIntents or recordFound")
        }
    }

    /// How many of a bundle's results may be handed in and not yet settled: with two, a bundle
    /// rarely waits for a commit (its oldest result had two requests' time to commit, in a batch
    /// with the other bundles'), and the batches are fuller. A result waits for its commit at most
    /// the group commit's maximum delay either way (``GroupCommit``); a crash loses at most the
    /// results of the last few milliseconds, which the keys and the look on the server cover.
    static let unsettledResults = 2

    /// The created step's result was handed to the group commit.
    mutating func resultHandedIn(stopping: Bool) -> Action {
        precondition(phase == .handingIn, "resultHandedIn only after handInResult")
        resultsPending += 1
        index += 1
        phase = .stepping
        return advance(stopping: stopping)
    }

    /// The oldest result not settled is committed (`committed`), or could not be.
    mutating func settled(committed: Bool, stopping: Bool) -> Action {
        guard case .settling(let then) = phase else { preconditionFailure("settled only after settleResult") }
        resultsPending -= 1
        // The server has that step; the deterministic key makes sending it again later harmless.
        // The results after it are settled too before the bundle goes back.
        guard committed else { return settleThen(.finish(.giveBack(.checkpointFailed))) }
        return settleThen(then, stopping: stopping)
    }

    // MARK: Rules

    /// On to the next step not done; the end when there is none.
    mutating func advance(stopping: Bool) -> Action {
        while index < plan.steps.count {
            let step = plan.steps[index]
            if let done = completed[step.key] {
                guard done.contentDigest == step.contentDigest else {
                    let failure = BundleFailure(
                        reason: .changedAfterUpload, step: step.key,
                        message:
                            "this record was uploaded before (server id \(done.serverID)) and has changed since; the API is create-only"
                    )
                    return settleThen(.finish(.fail(failure, stepAnswered: false)))
                }
                serverIDs[step.key] = done.serverID
                index += 1
                continue
            }
            if stopping { return settleThen(.finish(.giveBack(.stopping))) }
            guard let path = step.path(serverIDs: serverIDs) else {
                preconditionFailure("plan order guarantees the parent of \(step.key) is done first")
            }
            if !intentsCommitted.contains(step.key) {
                let intents = intentsToRecord(from: index)
                phase = .recordingIntents(intents.map(\.stepKey))
                return .recordIntents(intents)
            }
            return beginTries(
                of: step, path: path, lookFirst: step.kind == .session || ambiguousBefore.contains(step.key),
                stopping: stopping)
        }
        return settleThen(.finish(.done))
    }

    /// Acts on a step's resolution (the result before it is settled).
    mutating func act(on resolution: Resolution, stopping: Bool) -> Action {
        let step = plan.steps[index]
        if let done = completed[step.key] {  // found while reconciling (the session step itself)
            serverIDs[step.key] = done.serverID
            index += 1
            phase = .stepping
            return advance(stopping: stopping)
        }
        let response: StepResponse
        let cutShort: Bool
        switch resolution {
        case .response(let answer, let stopped): (response, cutShort) = (answer, stopped)
        case .found(let id): (response, cutShort) = (.created(id: id, replayed: true), false)
        case .differs(let failure): return settleThen(.finish(.fail(failure, stepAnswered: true)))
        }
        guard case .created(let id, _) = response else {
            return settleThen(.finish(Self.finish(step, after: response, cutShort: cutShort)))
        }
        serverIDs[step.key] = id
        phase = .handingIn
        tries = nil
        return .handInResult(
            CheckpointStore.StepResult(sessionID: plan.sessionID, stepKey: step.key, serverID: id),
            found: resolution == .found(id))
    }

    /// Settles the oldest pending result first if `then` must wait for it (a finish waits for
    /// every one, another answer for room under ``unsettledResults``), then goes on with `then`.
    mutating func settleThen(_ then: AfterSettle, stopping: Bool = false) -> Action {
        let mustSettle =
            switch then {
            case .finish: resultsPending > 0
            case .act: resultsPending >= Self.unsettledResults
            }
        guard mustSettle else {
            switch then {
            case .finish(let finish): return self.finish(finish)
            case .act(let resolution): return act(on: resolution, stopping: stopping)
            }
        }
        phase = .settling(then: then)
        return .settleResult
    }

    mutating func finish(_ finish: Finish) -> Action {
        phase = .finished
        return .finish(finish)
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

    /// The intents of the step at `index` and of the steps after it not done, at most
    /// ``BundleUploader/intentsAhead``: a bundle of 50 steps commits its intents twice, whether
    /// or not the parents of those steps are created yet.
    private func intentsToRecord(from index: Int) -> [CheckpointStore.StepIntent] {
        Array(
            plan.steps[index...].lazy.filter { completed[$0.key] == nil }.prefix(BundleUploader.intentsAhead)
                .map(intent(of:)))
    }
}
