import Foundation
import Logging
import NIOPosix

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
    let checkpoints: CheckpointWriter
    /// Where step results go: they commit with those of the other bundles in flight.
    let results: GroupCommit
    let client: APIClient
    let retry: RetryPolicy
    /// When a deferred bundle is tried again, and when the worker gives up on it.
    var deferral = DeferralPolicy()
    let limits: BundleLimits
    let counters: RunCounters
    /// Where a bundle whose last reading never ended is read first (see ``IsolatedReading``).
    let isolatedReader: IsolatedReading?
    /// The look on the server before a step is sent again; nil: keys alone.
    let lookup: ServerLookup?
    /// The server's reference lists, checked before a bundle's first request; nil: not checked.
    var references: ReferenceCatalog? = nil
    let logger: Logger

    func process(_ claimed: ClaimedBundle) async -> UploadOutcome {
        var logger = logger
        logger[metadataKey: "bundle.name"] = "\(claimed.name)"
        let now = Date()

        // A bundle whose reading was cut short (the process died) too often is not opened again.
        let cutShort: Int
        do {
            cutShort = try await checkpoints.perform { [name = claimed.name] in
                try $0.beginReading(name: name, now: now)
            }
        } catch {
            checkpointFailed(error, logger: logger)
            return await giveBack(claimed, logger: logger)
        }
        if cutShort > 0, let outcome = await readAgainAfterCutShort(claimed, cutShort: cutShort, logger: logger) {
            return outcome
        }

        let bundle: ValidatedBundle
        switch await Self.inspect(
            claimed.path, identity: claimed.identity, size: claimed.size, limits: limits, stop: counters.stop)
        {
        case .success(let valid):
            bundle = valid
        case .failure(let error) where error.code == .readingStopped:
            return await giveBack(claimed, logger: logger)
        case .failure(let error) where error.code == .replacedAfterClaim:
            return leaveReplaced(claimed, error.errors[0].description, logger: logger)
        case .failure(let error):
            logger.warning("bundle is invalid", metadata: ["reason": "\(error.code)", "message": "\(error.errors[0])"])
            let culprit = error.errors[0].culprit
            let failure = BundleFailure(
                reason: FailureReason(error.code), field: culprit.isEmpty ? nil : culprit, message: error.description)
            return await fail(claimed, sessionID: nil, failure: failure, logger: logger)
        }
        let sessionID = bundle.session.session.id
        logger[metadataKey: "session.id"] = "\(sessionID)"
        let plan = UploadPlan(session: bundle.session, images: bundle.images)
        // The claim and the session's checkpoints in one trip to the writer, with one way out if
        // either fails: the bundle goes back uncounted.
        let completed: [String: CompletedStep]
        do {
            let (name, owner, totalSteps) = (claimed.name, ClaimOwner.current(runID: counters.runID), plan.steps.count)
            completed = try await checkpoints.perform {
                try $0.recordClaim(name: name, sessionID: sessionID, owner: owner, totalSteps: totalSteps, now: now)
                return try $0.completedSteps(sessionID: sessionID)
            }
        } catch {
            checkpointFailed(error, logger: logger)
            return await giveBack(claimed, logger: logger)
        }
        return await upload(
            claimed, plan: plan, images: BundleEntryReader(bundle: bundle), completed: completed, logger: logger)
    }

    /// Carries out ``BundleUploadState``'s actions for one bundle until it says where the bundle goes.
    private func upload(
        _ claimed: ClaimedBundle, plan: UploadPlan, images: BundleEntryReader, completed: [String: CompletedStep],
        logger: Logger
    ) async -> UploadOutcome {
        let sessionID = plan.sessionID
        var state = BundleUploadState(
            plan: plan, bundleName: claimed.name, completed: completed, checksReferences: references != nil)
        // The server's tree as first looked at for the steps an earlier process left ambiguous:
        // one request covers them all.
        var treeBefore: ServerTree? = nil
        // The result handed to the group commit last (it commits while the next step is sent).
        var pendingResult: GroupCommit.Ticket? = nil

        /// Records what a look at the session's tree found of the bundle; nil, or why the look fails.
        func reconcile(with tree: ServerTree) async -> ServerLookup.Look? {
            switch state.reconciliation(with: tree) {
            case .nothing:
                return nil
            case .differs(let failure):
                return .differs(failure)
            case .found(let found):
                do {
                    let entries = found.map { (intent: $0.intent, serverID: $0.serverID) }
                    let recorded = try await checkpoints.perform {
                        try $0.recordFoundOnServer(sessionID: sessionID, entries)
                    }
                    state.foundOnServer(zip(found, recorded).map { (stepKey: $0.intent.stepKey, done: $1) })
                    logger.info("found on the server, not sent again", metadata: ["steps": "\(found.count)"])
                    return nil
                } catch {
                    checkpointFailed(error, logger: logger)
                    return .failed(.retryable(status: nil, retryAfter: nil, message: "\(error)"))
                }
            }
        }

        /// Looks for `step` on the server before it is sent (again).
        func look(for step: UploadStep) async -> ServerLookup.Look {
            guard let lookup else { return .absent }
            let found: ServerLookup.Found
            // The tree read for the steps left ambiguous by an earlier process serves each of
            // them once, for its first look: after a try in this run, only a fresh read can tell.
            let firstLookOfAmbiguousBefore = state.takeAmbiguousBefore(step.key)
            if step.kind == .session {
                found = await lookup.tree(clientID: sessionID)
            } else if firstLookOfAmbiguousBefore, let treeBefore {
                found = .tree(treeBefore)
            } else if let sessionServerID = state.serverIDs["session"] {
                found = await lookup.tree(serverID: sessionServerID)
            } else {
                return .absent
            }
            switch found {
            case .unavailable, .tree(nil):
                return .absent
            case .failed(.rejected(let status, _, let message)):
                // A lookup the API refuses as a request (400): it cannot say; the key must do.
                logger.warning(
                    "a lookup was refused; sending under the key alone",
                    metadata: ["http.status": "\(status)", "message": "\(message)"])
                return .absent
            case .failed(let response):
                return .failed(response)
            case .tree(let tree?):
                if firstLookOfAmbiguousBefore && treeBefore == nil { treeBefore = tree }
                if step.kind == .session, let problem = await reconcile(with: tree) { return problem }
                switch tree.match(step) {
                case .absent: return .absent
                case .present(let id): return .found(id)
                case .differs(let id, let field, let server, let bundle):
                    return .differs(
                        BundleUploadState.changedOnServer(step, id: id, field: field, server: server, bundle: bundle))
                }
            }
        }

        var action = state.start(stopping: counters.shouldStop)
        while true {
            switch action {
            case .checkReferences(let uses):
                guard let references else { preconditionFailure("references are checked only with a catalog") }
                action = state.referencesChecked(await references.check(uses), stopping: counters.shouldStop)
            case .recordIntents(let intents):
                do throws(CheckpointError) {
                    // Here when nothing would make this thread wait, else on the writer's thread.
                    let outcomes: [StepIntentOutcome]
                    if let here = try checkpoints.store.recordIntentsIfAvailable(sessionID: sessionID, intents) {
                        outcomes = here
                    } else {
                        outcomes = try await checkpoints.perform { try $0.recordIntents(sessionID: sessionID, intents) }
                    }
                    action = state.intentsRecorded(outcomes, stopping: counters.shouldStop)
                } catch {
                    checkpointFailed(error, logger: logger)
                    action = state.checkpointFailed()
                }
            case .send(let step, let path, let lookFirst):
                let resolution = await resolve(
                    step, path: path, images: images, lookFirst: lookFirst, look: look, logger: logger)
                action = state.resolved(resolution, stopping: counters.shouldStop)
            case .handInResult(let result):
                counters.stepAnswered()
                pendingResult = results.submit(result)
                logger.debug("step done", metadata: ["step": "\(result.stepKey)", "server.id": "\(result.serverID)"])
                action = state.resultHandedIn(stopping: counters.shouldStop)
            case .settleResult:
                guard let ticket = pendingResult else { preconditionFailure("a result to settle was handed in") }
                pendingResult = nil
                let error = await results.settle(ticket)
                if let error { checkpointFailed(error, logger: logger) }
                action = state.settled(committed: error == nil, stopping: counters.shouldStop)
            case .finish(let finish):
                return await self.finish(claimed, finish, sessionID: sessionID, steps: plan.steps.count, logger: logger)
            }
        }
    }

    /// Moves the bundle where its upload ended, and tells the run's counters.
    private func finish(
        _ claimed: ClaimedBundle, _ finish: BundleUploadState.Finish, sessionID: String, steps: Int, logger: Logger
    ) async -> UploadOutcome {
        switch finish {
        case .done:
            do {
                let final = try await Self.offTheLoop { () throws(SpoolError) in try claimed.moveToDone() }
                await recordAfterMove(of: claimed.name, to: "done/\(final)", logger: logger) {
                    [name = claimed.name] store in
                    try store.recordDone(name: name, sessionID: sessionID)
                    if final != name { try store.renamed(from: name, to: final) }
                }
                logger.info("bundle synced", metadata: ["steps": "\(steps)", "moved.to": "done/\(final)"])
                return .done
            } catch {
                logger.error("cannot move the bundle to done/", metadata: ["error": "\(error)"])
                claimed.release()  // stays in processing/, resumed (all steps done) by the next run
                return .returned
            }
        case .fail(let failure, let stepAnswered):
            if stepAnswered { counters.stepAnswered() }
            logger.warning(
                failure.reason == .unknownReference
                    ? "the bundle names an id the server's list does not hold: nothing of it is sent"
                    : "a step failed for good",
                metadata: [
                    "step": "\(failure.step ?? "-")", "reason": "\(failure.reason)",
                    "http.status": "\(failure.httpStatus.map(String.init) ?? "-")",
                    "field": "\(failure.field ?? "-")", "message": "\(failure.message ?? "")",
                ])
            return await fail(claimed, sessionID: sessionID, failure: failure, logger: logger)
        case .deferBundle(let failure, let answered):
            // No HTTP answer after every retry opens the breaker at once: the API is unreachable.
            if let reason = counters.stepKeptFailing(answered: answered) {
                logger.error(
                    "circuit breaker open: the run stops claiming and gives bundles back for later (exit 75)",
                    metadata: ["reason": "\(reason)"])
            }
            return await deferBundle(claimed, sessionID: sessionID, failure: failure, logger: logger)
        case .giveBack(let why):
            if case .credentialsRefused(let status, let message) = why {
                logger.error(
                    "the API refused the credentials", metadata: ["http.status": "\(status)", "message": "\(message)"])
                counters.credentialsRefused()
            }
            if case .apiMisdirected(let message) = why, counters.report(\.apiMisdirected) {
                logger.error(
                    "the API URL does not lead to the API: the run stops and gives bundles back (exit 78)",
                    metadata: ["api.url": "\(MaskedURL.string(client.baseURL))", "message": "\(message)"])
            }
            if case .apiNotTrusted(let message) = why, counters.report(\.apiNotTrusted) {
                logger.error(
                    "the API cannot be trusted: the run stops and gives bundles back (exit 76)",
                    metadata: ["message": "\(message)"])
            }
            return await giveBack(claimed, logger: logger)
        }
    }

    /// From this size on, a bundle is validated on NIO's blocking-work thread pool
    /// (``inspect(_:size:limits:)``). Compressed size: what it unpacks to is only known by reading
    /// it, but ``BundleLimits`` caps the ratio at 100:1, so below this a bundle unpacks to at most
    /// about 100 MiB (a tenth of a second to read and hash), and a realistic one (photos, which do
    /// not compress) to about its own size, well under 10 ms.
    static let inspectedOffTheLoopFrom: Int64 = 1 << 20

    /// Without a child process to read in (the library used in-process), how many readings of a
    /// bundle may be cut short by the process dying before it goes to `failed/` unread
    /// (``BundleError/Code/readerCrashed``). A machine rebooting or a run killed by its timer in
    /// the middle of a reading is no reason to give up on a bundle, so not one.
    static let readingsCutShortLimit = 3

    /// The last reading of this bundle never ended. Read it in a child process first, if there is
    /// one to run (``RunOptions/isolatedReader``): a bundle that kills or stalls the child goes to
    /// `failed/` now, and one that does not was innocent and is read as usual (nil). Without one,
    /// the bundle goes to `failed/` once ``readingsCutShortLimit`` readings were cut short.
    private func readAgainAfterCutShort(_ claimed: ClaimedBundle, cutShort: Int, logger: Logger) async -> UploadOutcome?
    {
        func failure(_ message: String) -> BundleFailure {
            BundleFailure(reason: FailureReason(.readerCrashed), message: message)
        }
        let advice = "check it with `dopesync inspect` where a crash does no harm, then requeue or remove it"
        guard let isolatedReader else {
            guard cutShort >= Self.readingsCutShortLimit else { return nil }
            logger.error(
                "bundle was being read each time a process died", metadata: ["readings.cut.short": "\(cutShort)"])
            return await fail(
                claimed, sessionID: nil,
                failure: failure(
                    "reading this bundle was cut short \(cutShort) times (the process crashed, ran out of memory or was killed "
                        + "while reading it), so it is not opened again; \(advice)"), logger: logger)
        }
        logger.notice(
            "the last reading of this bundle never ended: reading it in a separate process first",
            metadata: ["readings.cut.short": "\(cutShort)"])
        let time = limits.readingTime(forFileOfSize: claimed.size) + .seconds(10)  // and the child's start-up
        switch await isolatedReader.read(claimed.path, time: time, stop: counters.stop) {
        case .survived, .notStarted:
            return nil
        case .stopped:
            return await giveBack(claimed, logger: logger)
        case .timedOut:
            let message =
                "reading this bundle in a separate process took longer than its time budget of \(time.formattedSeconds): "
                + "refused as a hostile or damaged archive"
            return await fail(
                claimed, sessionID: nil,
                failure: BundleFailure(reason: FailureReason(.overTimeBudget), message: message), logger: logger)
        case .killed(let signal):
            logger.error("reading this bundle killed a separate reader process", metadata: ["signal": "\(signal)"])
            return await fail(
                claimed, sessionID: nil,
                failure: failure(
                    "reading this bundle killed the reader: a process died while reading it, and so did a separate process "
                        + "that read only it (signal \(signal)); it is not opened again; \(advice)"), logger: logger)
        }
    }

    /// Records in the checkpoint database what a move already did. The move cannot be undone, so a
    /// failure here leaves the database saying less than the folders (`status` would show the
    /// bundle where it no longer is): logged with where the bundle went, and the run stops with 73
    /// so that a person looks, as for any database that cannot be written.
    private func recordAfterMove(
        of name: String, to place: String, logger: Logger,
        _ record: @escaping @Sendable (CheckpointStore) throws -> Void
    ) async {
        do {
            try await checkpoints.perform(record)
        } catch {
            logger.error(
                "the bundle moved but the checkpoint database could not record it",
                metadata: [
                    "moved.to": "\(place)", "error": "\(error)",
                ])
            if counters.report(\.checkpointsFailed) {
                logger.critical(
                    "the checkpoint database cannot be written: the run stops claiming and gives bundles back (exit 73)",
                    metadata: ["error": "\(error)"])
            }
        }
    }

    /// Logs a checkpoint error; one of the database itself (``CheckpointError/isDatabaseFailure``)
    /// also stops the run: no bundle could be checkpointed, so they are given back, and exit 73.
    private func checkpointFailed(_ error: CheckpointError, logger: Logger) {
        logger.error("checkpoint database error", metadata: ["error": "\(error)"])
        if error.isDatabaseFailure, counters.report(\.checkpointsFailed) {
            logger.critical(
                "the checkpoint database cannot be written: the run stops claiming and gives bundles back (exit 73)",
                metadata: ["error": "\(error)"])
        }
    }

    /// Reads the whole bundle through and validates it. A big one goes to NIO's blocking-work thread
    /// pool: it takes up to a second or two, and the threads running the uploads are NIO's event
    /// loops in `dopesync` (Swift's global executor there), which must keep the other bundles'
    /// connections moving. A small one is read where it is: sending every bundle to the pool and
    /// back cost the run about a tenth more CPU in all, in thread switches.
    static func inspect(
        _ path: String, identity: FileIdentity?, size: Int64, limits: BundleLimits, stop: StopRequest
    ) async -> Result<ValidatedBundle, BundleValidationError> {
        let inspect = { @Sendable in
            Result { () throws(BundleValidationError) in
                try BundleInspector(limits: limits).inspect(path: path, expected: identity, stop: stop)
            }
        }
        guard size >= inspectedOffTheLoopFrom else { return inspect() }
        return await onBlockingPool(inspect)
    }

    /// Moves a bundle (rename, sidecar, folder syncs) on NIO's blocking-work pool: a sync waits for
    /// the disk, and no event loop should.
    static func offTheLoop<Value: Sendable>(_ move: @escaping @Sendable () throws(SpoolError) -> Value)
        async throws(SpoolError) -> Value
    {
        try await onBlockingPool { Result { () throws(SpoolError) in try move() } }.get()
    }

    /// Runs `body` on NIO's process-wide blocking-work pool and returns its value.
    static func onBlockingPool<Value: Sendable>(_ body: @escaping @Sendable () -> Value) async -> Value {
        // The pool refuses work only once shut down, which the process-wide one never is, or when
        // the task is cancelled before it starts (uploads are not cancelled): then run it here.
        (try? await NIOThreadPool.singleton.runIfActive(body)) ?? body()
    }

    typealias Resolution = BundleUploadState.Resolution

    /// Sends a step, retrying what is retryable. Before a send whose request may already have
    /// reached the server (`lookFirst`, and every retry after an answer that leaves it unknown:
    /// no answer, a lost connection, a timeout, a 5xx, 409), looks for it there first: found, it
    /// is not sent; absent, it is sent again under the same key. A look that fails counts as a
    /// failed try, and nothing is sent on a guess.
    private func resolve(
        _ step: UploadStep, path: String, images: BundleEntryReader, lookFirst: Bool,
        look: (UploadStep) async -> ServerLookup.Look, logger: Logger
    ) async -> Resolution {
        var retry = 0
        var mustLook = lookFirst
        var renewedCredential = false
        while true {
            // The token this try sends: a refusal of it may be answered by a fresh one.
            let used = client.credential.current
            var response: StepResponse? = nil
            if mustLook {
                switch await look(step) {
                case .found(let id):
                    logger.info(
                        "found on the server, not sent again", metadata: ["step": "\(step.key)", "server.id": "\(id)"])
                    return .found(id)
                case .differs(let failure): return .differs(failure)
                case .failed(let answer): response = answer
                case .absent: break
                }
            }
            if response == nil {
                let (answer, bytes) = await client.send(step, path: path, images: images)
                counters.request(bytes: bytes)
                response = answer
            }
            guard let response else { preconditionFailure("a look or a send answers") }
            // Refused: the token may have been rotated (a new token file, a token command). With a
            // fresh one the step is sent again, once; a refusal is no outcome, so no look first.
            // (A proxy's 407 is about the proxy's credentials, not the token.)
            if case .unauthorized(let status, _) = response, status != 407, !renewedCredential,
                await client.credential.renewed(after: used, logger: logger) != nil
            {
                renewedCredential = true
                logger.notice("the API refused the token; sending the step again with the one read anew")
                continue
            }
            guard case .retryable(let status, let retryAfter, let message) = response else {
                return .response(response, cutShort: false)
            }
            mustLook = lookup != nil && Self.outcomeUnknown(status: status)
            func stop(_ cutShort: Bool) -> Resolution { .response(response, cutShort: cutShort) }
            retry += 1
            guard retry < self.retry.attempts else { return stop(false) }
            guard !counters.shouldStop else { return stop(true) }
            guard
                let delay = self.retry.delay(
                    beforeRetry: retry, retryAfter: retryAfter, random: Double.random(in: 0..<1))
            else {
                return stop(false)
            }
            logger.info(
                "retrying a step",
                metadata: [
                    "step": "\(step.key)", "http.status": "\(status.map(String.init) ?? "-")", "message": "\(message)",
                    "retry": "\(retry)",
                ])
            do {
                try await Task.sleep(for: delay)
            } catch {
                return stop(true)  // cancelled: not this bundle's attempt, as for a run stopping
            }
        }
    }

    /// Whether a retryable answer leaves open that the server did create the record (WORKER.md:
    /// no answer, a timeout, a 5xx, a 409 in flight, or a 2xx that did not confirm it), so the
    /// step is looked for before it is sent again. A 408, 425 or 429 says the request was not
    /// processed: a look would only cost a request.
    static func outcomeUnknown(status: Int?) -> Bool {
        guard let status else { return true }
        return ![408, 425, 429].contains(status)
    }

    private func fail(_ claimed: ClaimedBundle, sessionID: String?, failure: BundleFailure, logger: Logger) async
        -> UploadOutcome
    {
        // Only for the sidecar's attempts and first-seen lines: a sidecar without them still says why.
        let state = try? await checkpoints.perform { [name = claimed.name] in try $0.bundleState(name: name) }
        let sidecar = ErrorSidecar(
            bundle: claimed.name, session: sessionID, failedAt: Date(), failure: failure,
            attempts: state?.attempts, firstSeen: state?.firstSeen
        )
        do {
            let final = try await Self.offTheLoop { () throws(SpoolError) in try claimed.moveToFailed(sidecar) }
            await recordAfterMove(of: claimed.name, to: "failed/\(final)", logger: logger) {
                [name = claimed.name] store in
                try store.recordFailure(name: name, sessionID: sessionID, error: failure)
                if final != name { try store.renamed(from: name, to: final) }
            }
            logger.warning("bundle failed", metadata: ["reason": "\(failure.reason)", "moved.to": "failed/\(final)"])
            return .failed(reason: failure.reason)
        } catch {
            logger.error("cannot move the bundle to failed/", metadata: ["error": "\(error)"])
            claimed.release()
            return .returned
        }
    }

    private func deferBundle(_ claimed: ClaimedBundle, sessionID: String, failure: BundleFailure, logger: Logger) async
        -> UploadOutcome
    {
        do {
            let deferral = try await checkpoints.perform { [name = claimed.name, policy = self.deferral] in
                try $0.recordDeferral(name: name, sessionID: sessionID, error: failure, policy: policy)
            }
            if deferral.exhausted {
                // Not the last error's fault more than the others': the worker gave up on retrying.
                let age = Date().timeIntervalSince(deferral.firstSeen)
                let last = "\(failure.reason)" + (failure.message.map { ": \($0)" } ?? "")
                let gaveUp = BundleFailure(
                    reason: .gaveUp, step: failure.step, httpStatus: failure.httpStatus,
                    message:
                        "gave up after \(deferral.attempts) attempts over \(SpoolStatus.age(age)) "
                        + "(the limits: \(self.deferral.limitsText)); the last error: \(last)")
                return await fail(claimed, sessionID: sessionID, failure: gaveUp, logger: logger)
            }
            let final = try await Self.offTheLoop { () throws(SpoolError) in
                try claimed.giveBack()
            }
            if final != claimed.name {
                await recordAfterMove(of: claimed.name, to: "incoming/\(final)", logger: logger) {
                    [name = claimed.name] store in
                    try store.renamed(from: name, to: final)
                }
            }
            logger.info(
                "bundle deferred",
                metadata: [
                    "attempts": "\(deferral.attempts)", "next.attempt": "\(deferral.nextAttemptAt)",
                    "reason": "\(failure.reason)",
                ])
            return .deferred
        } catch let error as CheckpointError {
            // Nothing moved yet: the bundle goes back uncounted.
            checkpointFailed(error, logger: logger)
            return await giveBack(claimed, logger: logger)
        } catch {
            logger.error("cannot defer the bundle", metadata: ["error": "\(error)"])
            claimed.release()
            return .returned
        }
    }

    /// Something else was put at `processing/NAME` after the claim (only the worker's own user, or
    /// root, can write there): it is not read, not moved and not blamed on a bundle; the claim
    /// ends and a person is told, once per run that finds it.
    private func leaveReplaced(_ claimed: ClaimedBundle, _ why: String, logger: Logger) -> UploadOutcome {
        logger.error(
            "a claimed bundle was replaced in processing/: what is there now is left alone for a person",
            metadata: ["error": "\(why)"])
        claimed.release()
        return .returned
    }

    private func giveBack(_ claimed: ClaimedBundle, logger: Logger) async -> UploadOutcome {
        do {
            _ = try await Self.offTheLoop { () throws(SpoolError) in try claimed.giveBack() }
            // Only `status`'s "last outcome: returned"; the bundle itself is back in incoming/.
            try? await checkpoints.perform { [name = claimed.name] in try $0.recordReturned(name: name) }
        } catch {
            logger.error("cannot give the bundle back", metadata: ["error": "\(error)"])
            claimed.release()  // stays in processing/; the next run takes it back as an orphan
        }
        return .returned
    }
}
