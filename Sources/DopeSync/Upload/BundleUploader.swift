import Foundation
import Logging

/// How one bundle's work ended.
public enum UploadOutcome: Sendable, Equatable {
    case done
    case failed(reason: FailureReason)
    case deferred
    /// Given back without counting an attempt (credentials refused, run stopping).
    case returned
}

/// In-run retries of one step: capped exponential backoff with full jitter, honouring
/// `Retry-After` (AWS's "full jitter": a uniform delay between 0 and the capped exponential).
public struct RetryPolicy: Sendable {
    public var attempts = 4
    public var base: Duration = .milliseconds(200)
    public var cap: Duration = .seconds(5)
    /// A `Retry-After` longer than this defers the bundle instead of holding a slot.
    public var longestRetryAfter: Duration = .seconds(30)
    public init() {}

    /// The wait before retry number `retry` (1 for the first retry); `random` is in 0..<1.
    public func delay(beforeRetry retry: Int, retryAfter: Duration?, random: Double) -> Duration? {
        if let retryAfter { return retryAfter <= longestRetryAfter ? retryAfter : nil }
        let exponential = base * Int(1 << min(retry - 1, 20))
        return min(exponential, cap) * random
    }
}

/// Uploads one claimed bundle: validate, plan, then each step in order with its checkpoint.
struct BundleUploader: Sendable {
    /// How many steps' intents one commit records ahead of sending them. Each is committed before
    /// its step is sent; recording them ahead takes the intent commit off most steps' path. A run
    /// that stops leaves at most this many intents of steps never sent, which are sent (for the
    /// first time, under the same keys) when the bundle is resumed.
    static let intentsAhead = 32

    /// Every checkpoint read and write, on the writer's own thread.
    let checkpoints: any CheckpointStorage
    /// Whether this worker still holds a bundle (a lease on several hosts).
    let claims: any ClaimStorage
    /// Where step results go: they commit with those of the other bundles in flight.
    let results: GroupCommit
    let client: APIClient
    let retry: RetryPolicy
    /// When a deferred bundle is tried again, and when the worker gives up on it.
    var deferral = DeferralPolicy()
    /// Where a bundle goes once its upload is over.
    var disposition: BundleDisposition {
        BundleDisposition(
            checkpoints: checkpoints, claims: claims, deferral: deferral, counters: counters, apiURL: client.baseURL)
    }
    let limits: BundleLimits
    let counters: RunCounters
    /// Where a bundle whose last reading never ended is read first (see ``IsolatedReading``).
    let isolatedReader: IsolatedReading?
    /// The look on the server before a step is sent again; nil: keys alone.
    let lookup: ServerLookup?
    /// The server's reference lists, checked before a bundle's first request; nil: not checked.
    var references: ReferenceCatalog? = nil
    /// The API the run's checkpoints are recorded against (``APIBinding``): a session's steps done
    /// against another are not done here.
    var api: String
    let logger: Logger

    func process(_ claimed: ClaimedBundle) async -> UploadOutcome {
        var logger = logger
        logger[metadataKey: "bundle.name"] = "\(claimed.name)"
        let now = Date()

        // A bundle whose reading was cut short (the process died) too often is not opened again.
        let cutShort: Int
        do {
            cutShort = try await checkpoints.beginReading(name: claimed.name, now: now)
        } catch {
            disposition.checkpointFailed(error, logger: logger)
            return await disposition.giveBack(claimed, logger: logger)
        }
        logger.debug("reading the bundle", metadata: ["readings.cut.short": "\(cutShort)"])
        if cutShort > 0, let outcome = await readAgainAfterCutShort(claimed, cutShort: cutShort, logger: logger) {
            return outcome
        }

        let bundle: ValidatedBundle
        switch await validate(claimed, logger: logger) {
        case .success(let valid): bundle = valid
        case .failure(let ended): return ended.outcome
        }
        let sessionID = bundle.session.session.id
        logger[metadataKey: "session.id"] = "\(sessionID)"
        let plan: UploadPlan
        do {
            plan = try UploadPlan(session: bundle.session, images: bundle.images)
        } catch {
            let failure = BundleFailure(
                reason: FailureReason(error.code), field: error.culprit, message: error.description)
            return await disposition.fail(claimed, sessionID: sessionID, failure: failure, logger: logger)
        }
        // One bundle of a session at a time in the whole spool (``SessionHold``): another of it
        // under way now means this one waits for a later run, uncounted.
        let hold: SessionHold?
        switch await holdSession(sessionID, of: claimed, logger: logger) {
        case .held(let held): hold = held
        case .busy: return await disposition.giveBack(claimed, logger: logger)
        }
        if let hold { claimed.keep(hold) }
        let outcome = await upload(claimed, bundle: bundle, plan: plan, logger: logger)
        // Released by the bundle's move; left alone, the bundle still in processing/.
        if let hold, !hold.isReleased { await SpoolCalls.run { hold.release() } }
        return outcome
    }

    private enum SessionHoldAnswer {
        /// The session is this bundle's until released (nil: going on without a hold, see below).
        case held(SessionHold?)
        /// Another bundle of the session is being uploaded.
        case busy
    }

    /// Takes the session's hold from the claims' store (``ClaimStorage/holdSession(_:of:)``). A
    /// spool whose file system cannot lock (a `nolock` NFS mount, say) goes on without it, as
    /// before the hold existed, and says so; a spool that cannot keep the holds' files stops the
    /// run (exit 73); any other failure gives the bundle back, uncounted.
    private func holdSession(_ sessionID: String, of claimed: ClaimedBundle, logger: Logger) async
        -> SessionHoldAnswer
    {
        switch await claims.holdSession(sessionID, of: claimed) {
        case .held(let hold):
            return .held(hold)
        case .busy:
            logger.notice(
                "another bundle of this session is being uploaded: this one waits for a later run, uncounted")
            return .busy
        case .unavailable(let reason):
            logger.warning(
                "cannot hold the session while its bundle uploads; going on without (two bundles of it at once could send a record twice to an API that ignores keys)",
                metadata: ["error": "\(reason)"])
            return .held(nil)
        case .spoolNotWritable(let reason):
            if counters.report(\.spoolNotWritable) {
                logger.critical(
                    "cannot hold the session while its bundle uploads: the spool cannot be written; the run gives the bundle back, stops claiming, and exits 73",
                    metadata: ["error": "\(reason)"])
            }
            return .busy
        case .failed(let reason):
            _ = counters.report(\.sessionHoldFailed)
            logger.error(
                "cannot hold the session while its bundle uploads: given back, uncounted (exit 75)",
                metadata: ["error": "\(reason)"])
            return .busy
        }
    }

    /// Records the claim with the session's checkpoints, then uploads what is not done yet.
    private func upload(_ claimed: ClaimedBundle, bundle: ValidatedBundle, plan: UploadPlan, logger: Logger) async
        -> UploadOutcome
    {
        let (sessionID, now) = (bundle.session.session.id, Date())
        // The claim and the session's checkpoints in one trip to the writer, with one way out if
        // either fails: the bundle goes back uncounted.
        let completed: [String: CompletedStep]
        let producer = claimed.owner
        do {
            let (name, owner, totalSteps) = (claimed.name, ClaimOwner.current(runID: counters.runID), plan.steps.count)
            switch try await checkpoints.recordClaim(
                name: name, sessionID: sessionID, owner: owner, producer: producer, api: api, totalSteps: totalSteps,
                now: now)
            {
            case .resume(let steps):
                completed = steps
            case .anotherProducer(let first):
                logger.error(
                    "the bundle names a session another producer sent first: nothing of it is sent",
                    metadata: ["bundle.owner": "\(producer)", "session.owner": "\(first)"])
                return await disposition.fail(
                    claimed, sessionID: sessionID,
                    failure: .sessionOfAnotherProducer(sessionID, first: first, bundle: producer),
                    logger: logger)
            }
        } catch {
            disposition.checkpointFailed(error, logger: logger)
            return await disposition.giveBack(claimed, logger: logger)
        }
        let images = ArchiveImages(bundle: bundle)
        let outcome = await upload(claimed, plan: plan, images: images, completed: completed, logger: logger)
        await images.close()  // off the loop, where it is on one
        return outcome
    }

    /// Where a bundle went instead of being uploaded.
    private struct Ended: Error {
        let outcome: UploadOutcome
    }

    /// Reads the claimed bundle through and validates it; an invalid one goes to `failed/`, one
    /// whose reading was stopped back to `incoming/`, one replaced after its claim nowhere.
    private func validate(_ claimed: ClaimedBundle, logger: Logger) async -> Result<ValidatedBundle, Ended> {
        switch await Self.inspect(
            claimed.path, identity: claimed.identity, limits: limits, stop: counters.stop)
        {
        case .success(let valid):
            return .success(valid)
        case .failure(let error) where error.code == .readingStopped:
            return .failure(Ended(outcome: await disposition.giveBack(claimed, logger: logger)))
        case .failure(let error) where error.code == .replacedAfterClaim:
            return .failure(
                Ended(outcome: await disposition.leaveReplaced(claimed, error.errors[0].description, logger: logger)))
        case .failure(let error) where error.errors[0].isTheMachines:
            // No descriptor left, a disk or an NFS server failing: deferred, as an image that
            // cannot be read back is, and given up on only after the deferral's attempts.
            logger.error(
                "cannot read the bundle: the bundle is deferred, not blamed",
                metadata: ["message": "\(error.errors[0])"])
            let failure = BundleFailure(
                reason: FailureReason(.io),
                message: "the bundle could not be read, a fault of this machine, not of the bundle: \(error.errors[0])")
            return .failure(
                Ended(outcome: await disposition.deferBundle(claimed, sessionID: nil, failure: failure, logger: logger))
            )
        case .failure(let error):
            logger.warning("bundle is invalid", metadata: ["reason": "\(error.code)", "message": "\(error.errors[0])"])
            // The entry or field at fault; a problem of the whole archive names the file itself,
            // which is no field (and its processing/ path is gone once it moves).
            let culprit = error.errors[0].culprit
            let field = culprit.isEmpty || culprit == claimed.path ? nil : culprit
            let failure = BundleFailure(
                reason: FailureReason(error.code), field: field, message: Self.message(of: error, readAt: claimed))
            return .failure(
                Ended(outcome: await disposition.fail(claimed, sessionID: nil, failure: failure, logger: logger)))
        }
    }

    /// Carries out ``BundleUploadState``'s actions for one bundle until it says where the bundle goes:
    /// each action is done here and its outcome fed back as the next event; nothing else changes
    /// the state.
    private func upload(
        _ claimed: ClaimedBundle, plan: UploadPlan, images: ArchiveImages, completed: [String: CompletedStep],
        logger: Logger
    ) async -> UploadOutcome {
        var state = BundleUploadState(
            plan: plan, bundleName: claimed.name, completed: completed, checksReferences: references != nil,
            looksOnServer: lookup != nil, attemptsPerStep: retry.attempts)
        // The token the last request carried: a refusal of it may be answered by a fresh one.
        var tokenSent = client.credential.current
        var action = state.start(stopping: counters.shouldStop)
        while true {
            // Before every request, and before waiting to send one again: a claim whose lease ran
            // out (a paused process, a lost database, a body cut short) sends nothing more, and
            // waits for nothing; another worker may hold the bundle now.
            if action.needsTheClaim, !claims.holdsClaim(of: claimed.name) {
                return await abandon(claimed, settling: state.resultsNotSettled, logger: logger)
            }
            switch action {
            case .checkReferences(let uses):
                // No catalog, no check (the state asks only with one): nothing there refuses an id.
                let check = await references?.check(uses) ?? .passed
                action = state.referencesChecked(check, stopping: counters.shouldStop)
            case .recordIntents(let intents):
                action = await recordIntents(intents, in: &state, logger: logger)
            case .lookUp(_, let target):
                tokenSent = client.credential.current
                action = state.looked(await look(target, logger: logger), stopping: counters.shouldStop)
            case .recordFound(let found):
                action = await recordFound(found, in: &state, sessionID: plan.sessionID, logger: logger)
            case .send(let step, let path):
                tokenSent = client.credential.current
                let answer = await send(step, path: path, images: images, of: claimed.name)
                action = state.answered(answer, stopping: counters.shouldStop)
            case .renewCredential:
                let renewed = await client.credential.renewed(after: tokenSent, logger: logger) != nil
                if renewed {
                    counters.tokenChanged()
                    logger.notice("the API refused the token; sending the step again with the one read anew")
                }
                action = state.credentialRenewed(renewed, stopping: counters.shouldStop)
            case .checkToken(let step):
                let check = await client.checkToken(counting: counters)
                let verdict = APIClient.verdict(check, tokenCreatedThisRun: counters.createdWithCurrentToken)
                let said: Logger.Message =
                    switch verdict {
                    case .bundles:
                        "the API refused this bundle's request but takes the token: the bundle is deferred, the others go on"
                    case .token: "the API refuses the token itself"
                    case .undecided:
                        "the API refused this bundle's request and could not say whether it takes the token: the bundle goes back uncounted, the others go on"
                    }
                logger.warning(said, metadata: ["step": "\(step.key)", "token.check": "\(check)"])
                action = state.tokenChecked(verdict, stopping: counters.shouldStop)
            case .backOff(let step, let number, let retryAfter, let answer):
                action = state.backedOff(
                    await backOff(step, retry: number, retryAfter: retryAfter, after: answer, logger: logger),
                    stopping: counters.shouldStop)
            case .handInResult(let result, let found):
                // It commits while the next steps are sent (``BundleUploadState/unsettledResults`` at most).
                let ticket = handIn(result, found: found, logger: logger)
                action = state.resultHandedIn(ticket, stopping: counters.shouldStop)
            case .settleResult(let ticket):
                let error = await results.settle(ticket)
                if let error { disposition.checkpointFailed(error, logger: logger) }
                action = state.settled(committed: error == nil, stopping: counters.shouldStop)
            case .finish(let finish):
                return await disposition.finish(
                    claimed, finish, sessionID: plan.sessionID, steps: plan.steps.count, logger: logger)
            }
        }
    }

    /// Sends one step, its image (if any) streamed from the archive while the bundle's claim holds.
    private func send(_ step: UploadStep, path: String, images: ArchiveImages, of name: String) async -> StepResponse {
        var claimHeld: (@Sendable () -> Bool)? = nil
        if claims.claimsRunOut { claimHeld = { [claims] in claims.holdsClaim(of: name) } }
        let (answer, bytes) = await client.send(step, path: path, images: images, claimHeld: claimHeld)
        counters.request(bytes: bytes)
        if case .created = answer { counters.recordCreate() }
        return answer
    }

    /// Hands a step's result to the group commit, which commits it while the next step is sent.
    private func handIn(_ result: CheckpointStore.StepResult, found: Bool, logger: Logger) -> GroupCommit.Ticket {
        counters.stepAnswered()
        if found { logger.info("found on the server, not sent again", metadata: ["step": "\(result.stepKey)"]) }
        logger.debug("step done", metadata: ["step": "\(result.stepKey)", "server.id": "\(result.serverID)"])
        return results.submit(result)
    }

    /// Leaves a bundle whose claim ran out, after the results already handed in have committed
    /// or been refused: a record the server created is checkpointed if the store still takes it.
    private func abandon(_ claimed: ClaimedBundle, settling pending: [GroupCommit.Ticket], logger: Logger) async
        -> UploadOutcome
    {
        for ticket in pending { _ = await results.settle(ticket) }
        return await disposition.abandon(claimed, logger: logger)
    }

    /// The session's tree on the server, where ``BundleUploadState`` looks for a step.
    private func look(_ target: BundleUploadState.LookUp, logger: Logger) async -> ServerLookup.Found {
        // Without lookups the state asks for none; were it to, the keys alone would have to do.
        guard let lookup else { return .unavailable }
        let found: ServerLookup.Found
        switch target {
        case .sessionByClientID(let clientID): found = await lookup.tree(clientID: clientID)
        case .sessionTree(let serverID): found = await lookup.tree(serverID: serverID)
        }
        if case .failed(.rejected(let status, _, let message, _)) = found {
            // A lookup the API refuses as a request (400): it cannot say; the key must do.
            logger.warning(
                "a lookup was refused; sending under the key alone",
                metadata: ["http.status": "\(status)", "message": "\(message)"])
        }
        return found
    }

    /// Commits the intents of the steps about to be sent; the next action.
    private func recordIntents(
        _ intents: [CheckpointStore.StepIntent], in state: inout BundleUploadState, logger: Logger
    ) async -> BundleUploadState.Action {
        do {
            let outcomes = try await checkpoints.recordIntents(sessionID: state.plan.sessionID, intents)
            return state.intentsRecorded(outcomes, stopping: counters.shouldStop)
        } catch {
            disposition.checkpointFailed(error, logger: logger)
            return state.checkpointFailed()
        }
    }

    /// Records the steps a look found on the server as done; the next action.
    private func recordFound(
        _ found: [BundleUploadState.FoundStep], in state: inout BundleUploadState, sessionID: String, logger: Logger
    ) async -> BundleUploadState.Action {
        do {
            let entries = found.map { (intent: $0.intent, serverID: $0.serverID) }
            let recorded = try await checkpoints.recordFoundOnServer(sessionID: sessionID, entries)
            logger.info("found on the server, not sent again", metadata: ["steps": "\(found.count)"])
            return state.foundRecorded(
                zip(found, recorded).map { (stepKey: $0.intent.stepKey, done: $1) }, stopping: counters.shouldStop)
        } catch {
            disposition.checkpointFailed(error, logger: logger)
            return state.checkpointFailed()
        }
    }

    /// Waits before a retry: the policy's backoff with full jitter, or the answer's `Retry-After`.
    private func backOff(
        _ step: UploadStep, retry number: Int, retryAfter: Duration?, after answer: StepResponse, logger: Logger
    ) async -> BundleUploadState.BackOff {
        guard let delay = retry.delay(beforeRetry: number, retryAfter: retryAfter, random: Double.random(in: 0..<1))
        else { return .declined }
        if case .retryable(let status, _, let message) = answer {
            logger.info(
                "retrying a step",
                metadata: [
                    "step": "\(step.key)", "http.status": "\(status.map(String.init) ?? "-")", "message": "\(message)",
                    "retry": "\(number)",
                ])
        }
        do {
            try await sleepOnLoop(for: delay)
            return .waited
        } catch {
            return .cancelled  // not this bundle's attempt, as for a run stopping
        }
    }

    /// Without a child process to read in (the library used in-process), how many readings of a
    /// bundle may be cut short by the process dying before it goes to `failed/` unread
    /// (``BundleError/Code/readerCrashed``). A machine rebooting or a run killed by its timer in
    /// the middle of a reading is no reason to give up on a bundle, so not one.
    static let readingsCutShortLimit = 3

    /// The last reading of this bundle never ended. Read it in a child process first, if there is
    /// one to run (``RunOptions/isolatedReader``): a bundle that kills or stalls the child goes to
    /// `failed/` now, and one that does not was innocent and is read as usual (nil), until
    /// ``readingsCutShortLimit`` readings in a row in the worker were cut short all the same (a
    /// reading that ends, its claim recorded, starts the count again): then the
    /// worker's process dies while it reads this bundle beside others (its memory, most likely),
    /// and reading it again would end every run the same way, so it goes to `failed/`, the message
    /// saying that the bundle read alone did no harm. Without a child, the bundle goes to `failed/`
    /// once ``readingsCutShortLimit`` readings were cut short.
    private func readAgainAfterCutShort(_ claimed: ClaimedBundle, cutShort: Int, logger: Logger) async -> UploadOutcome?
    {
        func failure(_ message: String) -> BundleFailure {
            BundleFailure(reason: FailureReason(.readerCrashed), message: message)
        }
        let advice = "check it with `dopesync inspect` where a crash does no harm, then requeue or remove it"
        /// Past the limit of readings cut short in a row, to `failed/`, saying `why` not again.
        func failedAtTheLimit(_ why: String) async -> UploadOutcome? {
            guard cutShort >= Self.readingsCutShortLimit else { return nil }
            logger.error(
                "bundle was being read each time a process died", metadata: ["readings.cut.short": "\(cutShort)"])
            return await disposition.fail(
                claimed, sessionID: nil,
                failure: failure("reading this bundle was cut short \(cutShort) times \(why)"), logger: logger)
        }
        let unread =
            "(the process crashed, ran out of memory or was killed while reading it), so it is not opened again; \(advice)"
        guard let isolatedReader else { return await failedAtTheLimit(unread) }
        logger.notice(
            "the last reading of this bundle never ended: reading it in a separate process first",
            metadata: ["readings.cut.short": "\(cutShort)"])
        let time = limits.readingTime(forFileOfSize: claimed.size) + .seconds(10)  // and the child's start-up
        switch await isolatedReader.read(claimed.path, time: time, stop: counters.stop, logger: logger) {
        case .notStarted:
            return await failedAtTheLimit(unread)  // no child to ask: as without one
        case .survived:
            // Counted since its last reading that ended: only readings cut short in a row.
            return await failedAtTheLimit(
                "by the worker's process dying, though a separate process reads it alone without harm: the worker "
                    + "most likely runs out of memory reading several bundles at once (lower --concurrency, or raise "
                    + "the unit's MemoryMax=); it is not opened again until requeued")
        case .stopped:
            return await disposition.giveBack(claimed, logger: logger)
        case .timedOut:
            let message =
                "reading this bundle in a separate process took longer than its time budget of \(time.formattedSeconds): "
                + "refused as a hostile or damaged archive"
            return await disposition.fail(
                claimed, sessionID: nil,
                failure: BundleFailure(reason: FailureReason(.overTimeBudget), message: message), logger: logger)
        case .killed(let signal):
            logger.error("reading this bundle killed a separate reader process", metadata: ["signal": "\(signal)"])
            return await disposition.fail(
                claimed, sessionID: nil,
                failure: failure(
                    "reading this bundle killed the reader: a process died while reading it, and so did a separate process "
                        + "that read only it (signal \(signal)); it is not opened again; \(advice)"), logger: logger)
        }
    }

    /// What a refused bundle's sidecar says of it: its `processing/` path, where it was read and is
    /// no more once it is in `failed/`, named by the bundle's name (the sidecar's `bundle:` line).
    static func message(of error: BundleValidationError, readAt claimed: ClaimedBundle) -> String {
        error.errors.map { $0.culprit == claimed.path ? $0.message : $0.description }.joined(separator: "\n")
            .replacingOccurrences(of: claimed.path, with: claimed.name)
    }

    /// Reads the whole bundle through and validates it, on NIO's blocking-work thread pool: never
    /// on an event loop (Swift's global executor in `dopesync run`), whose other bundles'
    /// connections must keep moving, whatever the bundle's size.
    static func inspect(
        _ path: String, identity: FileIdentity?, limits: BundleLimits, stop: StopRequest
    ) async -> Result<ValidatedBundle, BundleValidationError> {
        let inspect = { @Sendable in
            Result { () throws(BundleValidationError) in
                try BundleInspector(limits: limits).inspect(path: path, expected: identity, stop: stop)
            }
        }
        return await BlockingPool.run(inspect)
    }

}

extension BundleUploadState.Action {
    /// A request about the bundle, or a wait to send one again: only while the claim holds.
    /// (A step left unconfirmed keeps its intent, so the worker that takes the bundle over looks
    /// on the server before sending it again.)
    fileprivate var needsTheClaim: Bool {
        switch self {
        case .lookUp, .send, .backOff: true
        default: false
        }
    }
}
