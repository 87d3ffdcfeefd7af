import Foundation
import Logging

/// `dopesync run`: one batch over the spool, for cron or a systemd timer.
public struct Worker: Sendable {
    public let options: RunOptions
    public let logger: Logger

    /// The loops the run's tasks and connections are on: one for a few bundles at once.
    private let placement: UploadExecutor.Placement

    public init(options: RunOptions, logger: Logger) {
        self.options = options
        self.logger = logger
        placement = UploadExecutor.placement(bundlesInFlight: options.concurrency)
    }

    /// Processes what is due (orphans first), then returns the summary and the exit status. The
    /// run is on NIO's loops in every process (``UploadExecutor``).
    public func run() async -> (RunSummary, ExitStatus) {
        await withTaskExecutorPreference(placement.executor) { await runOnLoops() }
    }

    private func runOnLoops() async -> (RunSummary, ExitStatus) {
        let started = ContinuousClock.now
        let spool = Spool(root: options.spoolRoot)
        let runID = UUID().uuidString.lowercased()
        if let database = options.database {
            return await runSharing(database, spool: spool, runID: runID, started: started)
        }
        let (mayCreate, allowRoot) = (options.createSpool, options.allowRoot)
        let busyTimeout = Int32(min(max(options.checkpointBusyTimeout / .milliseconds(1), 1), Double(Int32.max)))
        // The spool is checked, and the store opened, used and closed, on the writer's own thread,
        // never an event loop's.
        let open = { @Sendable () throws -> CheckpointStore in
            try spool.checkBeforeWriting(mayCreate: mayCreate, allowRoot: allowRoot)
            try spool.create()
            // Shared with other runs, kept by the store to the end: no migration starts under this run.
            guard let lock = try StoreLock.take(.run, in: spool) else { throw MigrationUnderWay() }
            // A spool bound to PostgreSQL: its SQLite file is not even made.
            let sqlite = StoreIdentity.sqlite(spool)
            let wasBound = try SpoolBinding.check(spool, store: sqlite, bindIfUnbound: false)
            let store = try CheckpointStore(spool: spool, holding: lock, busyTimeoutMilliseconds: busyTimeout)
            if let movedTo = try store.movedTo() {
                throw SpoolBinding.mismatch(
                    spool, bound: StoreIdentity(kind: .postgresql, id: nil, name: movedTo), given: sqlite)
            }
            if !wasBound { try SpoolBinding.check(spool, store: sqlite, bindIfUnbound: true) }
            return store
        }
        do {
            return try await CheckpointWriter.with(opening: open) { checkpoints in
                let shared = (try? await checkpoints.perform { $0.othersHeldTheStoreLock }) ?? true
                return await run(
                    spool: spool, checkpoints: checkpoints, claims: SpoolClaims(othersHeldTheStoreLock: shared),
                    runID: runID, started: started)
            }
        } catch let error as SpoolBindingError {
            return await refused(error, spool: spool, started: started)
        } catch is MigrationUnderWay {
            logger.critical(
                "`dopesync migrate` is copying the spool's checkpoints into PostgreSQL: the run claims nothing (exit 75); the next run finds the spool bound to the database",
                metadata: ["spool": "\(options.spoolRoot)"])
            return await endedBeforeStarting(spool, started: started, status: .temporaryFailure)
        } catch {
            logger.critical(
                "the spool cannot be used", metadata: ["spool": "\(options.spoolRoot)", "error": "\(error)"])
            // As root, nothing written at all: a metrics file made by root would be root's too.
            guard (error as? SpoolError)?.code != .runningAsRoot else {
                return (RunSummary(exitCode: ExitStatus.cannotCreate.rawValue), .cannotCreate)
            }
            return await endedBeforeStarting(spool, started: started)
        }
    }

    /// A run whose claims and checkpoints are in the PostgreSQL database several hosts share.
    /// A database that cannot be reached at the start: nothing claimed, exit 75 (78 when it
    /// refuses the user or password, 73 when a newer dopesync migrated it).
    private func runSharing(_ database: DatabaseSettings, spool: Spool, runID: String, started: ContinuousClock.Instant)
        async -> (RunSummary, ExitStatus)
    {
        do {
            let (mayCreate, allowRoot) = (options.createSpool, options.allowRoot)
            try await SpoolCalls.run { () throws(SpoolError) in
                try spool.checkBeforeWriting(mayCreate: mayCreate, allowRoot: allowRoot)
                try spool.create()
            }
        } catch {
            logger.critical(
                "the spool cannot be used", metadata: ["spool": "\(options.spoolRoot)", "error": "\(error)"])
            return await endedBeforeStarting(spool, started: started)
        }
        do {
            return try await PostgresCheckpoints.with(
                database, owner: ClaimOwner.current(runID: runID), logger: logger
            ) { checkpoints in
                // A database that cannot say its id is unusable as such (75 when unreachable).
                let store = try await checkpoints.storeIdentity()
                do throws(SpoolBindingError) {
                    try await bind(spool, to: store)
                } catch {
                    return await refused(error, spool: spool, started: started)
                }
                return await run(
                    spool: spool, checkpoints: checkpoints, claims: checkpoints, runID: runID, started: started)
            }
        } catch {
            let status = (error as? CheckpointError)?.exitStatusWhenUnusable ?? .temporaryFailure
            logger.critical(
                "the shared checkpoint database cannot be used: the run claims nothing (exit \(status.rawValue))",
                metadata: ["database": "\(database.url)", "error": "\(error)"])
            // The metrics file says so too, with the spool's counts: not the run before's.
            return await endedBeforeStarting(spool, started: started, status: status)
        }
    }

    /// The end of a run given a store that is not the spool's (or a binding it cannot read).
    private func refused(_ error: SpoolBindingError, spool: Spool, started: ContinuousClock.Instant) async
        -> (RunSummary, ExitStatus)
    {
        let reason =
            error.code == .otherStore
            ? "the spool is bound to another store" : "which store holds the spool's checkpoints cannot be told"
        logger.critical(
            "\(reason): the run claims nothing (exit \(error.exitStatus.rawValue))",
            metadata: ["spool": "\(options.spoolRoot)", "error": "\(error)"])
        return await endedBeforeStarting(spool, started: started, status: error.exitStatus)
    }

    /// Checks that the spool is bound to this database, and binds a spool bound to none, unless
    /// its SQLite file holds checkpoints never migrated: those must be migrated first, or every
    /// step they record would be sent again. A file that cannot be read refuses too.
    private func bind(_ spool: Spool, to store: StoreIdentity) async throws(SpoolBindingError) {
        let wasBound = try await SpoolCalls.run { () throws(SpoolBindingError) in
            try SpoolBinding.check(spool, store: store, bindIfUnbound: false)
        }
        guard !wasBound else { return }
        let unmigrated: Bool
        do {
            unmigrated = try await SpoolCalls.run { () throws(CheckpointError) in
                try CheckpointStore.holdsUnmigratedSteps(spool)
            }
        } catch {
            throw SpoolBindingError(
                code: .unreadable,
                message: "cannot tell whether \(spool.databasePath) holds checkpoints never migrated: \(error)",
                path: spool.databasePath)
        }
        if unmigrated { throw SpoolBinding.mismatch(spool, bound: .sqlite(spool), given: store) }
        _ = try await SpoolCalls.run { () throws(SpoolBindingError) in
            try SpoolBinding.check(spool, store: store, bindIfUnbound: true)
        }
    }

    /// The spool's file system is below `min-free-space`: the run claims nothing (exit 73), and says
    /// how much is free and what `prune` would free (by the store's done times, as `prune` goes).
    func reportBelowFloor(
        _ space: FileSystemSpace, spool: Spool, checkpoints: any CheckpointStorage, counters: RunCounters
    ) async {
        guard counters.report(\.belowFreeSpaceFloor) else { return }
        let done = await SpoolCalls.run { (try? spool.list(.done)) ?? [] }
        let doneAt = (try? await checkpoints.doneTimes()) ?? [:]
        let now = Date()
        let old = PruneCommand.prunable(
            done, doneAt: doneAt, before: now.addingTimeInterval(-(options.pruneAfter / .seconds(1))))
        /// "12 MiB in 3 bundles".
        func held(_ entries: [SpoolEntry]) -> String {
            "\(ByteCount(entries.reduce(0) { $0 + $1.size })) in \(entries.count) bundles"
        }
        var metadata: Logger.Metadata = [
            "free": "\(ByteCount(space.free))",
            "floor": "\(options.minFreeSpace) (\(ByteCount(options.minFreeSpace.bytes(ofTotal: space.total))))",
            "prune.frees": "\(held(old)) (done over \(SpoolStatus.age(options.pruneAfter / .seconds(1))) ago)",
            "done": "\(held(done))",
            "spool": "\(spool.root)",
        ]
        // Recorded done ahead of this clock (it has gone back since): prune counts them from when
        // it finds them, under a synchronized clock, and frees them only then.
        let believable = WallClock.latestBelievable(at: now)
        let ahead = done.filter { PruneCommand.doneTime(of: $0, doneAt: doneAt) > believable }
        if !ahead.isEmpty {
            metadata["done.ahead"] = .string(
                "\(held(ahead)) recorded done ahead of this clock, which has gone back since: prune keeps them for "
                    + "its retention from when it finds them under a synchronized clock (NTP); delete them from "
                    + "done/ by hand to free the space now")
        }
        logger.critical(
            "the spool's file system is below its free-space floor: the run claims nothing and gives back what it holds (exit 73)",
            metadata: metadata)
    }

    /// The end of a run that could not use its spool or database (exit 73; 75 or 78 for the shared
    /// database, 78 for a store that is not the spool's): nothing was claimed.
    /// The metrics file is written all the same, where the disk allows, so that it does not go on
    /// showing the run before; the last success time is taken from it, the database being unusable.
    private func endedBeforeStarting(
        _ spool: Spool, started: ContinuousClock.Instant, status: ExitStatus = .cannotCreate
    ) async -> (RunSummary, ExitStatus) {
        var summary = RunSummary(exitCode: status.rawValue)
        summary.seconds = (ContinuousClock.now - started) / .seconds(1)
        if let metricsFile = options.metricsFile {
            let written = await RunMetrics.writeEndedBeforeStarting(
                to: metricsFile, spool: spool, summary: summary, floor: options.minFreeSpace)
            if case .failure(let error) = written {
                logger.error(
                    "cannot write the metrics file", metadata: ["metrics.file": "\(metricsFile)", "error": "\(error)"])
            }
        }
        return (summary, status)
    }

    private func run(
        spool: Spool, checkpoints: any CheckpointStorage, claims: any ClaimStorage, runID: String,
        started: ContinuousClock.Instant
    ) async -> (RunSummary, ExitStatus) {
        let counters = RunCounters(runID: runID, breaker: options.breaker, stop: options.stop)
        do throws(CheckpointError) {
            let (host, pid) = (ClaimOwner.hostName, ProcessInfo.processInfo.processIdentifier)
            try await checkpoints.recordRunStarted(runID: runID, host: host, pid: pid)
        } catch {
            // Only the run's own record otherwise; but a database that cannot be written at all
            // could not checkpoint a single step: claim nothing.
            if error.isUnreachable {
                logger.critical(
                    "the shared checkpoint database cannot be reached: the run claims nothing (exit 75)",
                    metadata: ["error": "\(error)"])
                return await endedBeforeStarting(spool, started: started, status: .temporaryFailure)
            }
            if error.isDatabaseFailure {
                logger.critical(
                    "the checkpoint database cannot be written: the run claims nothing (exit 73)",
                    metadata: ["error": "\(error)"])
                return await endedBeforeStarting(spool, started: started)
            }
        }
        if let space = await SpoolCalls.run({ FileSystemSpace(of: spool.root) }), space.isBelow(options.minFreeSpace) {
            await reportBelowFloor(space, spool: spool, checkpoints: checkpoints, counters: counters)
        }
        let work: DueWork
        do {
            work = try await waitingForHeldBundles(
                DueWork.list(spool, checkpoints: checkpoints, minAge: options.minAge, logger: logger),
                spool: spool, checkpoints: checkpoints, started: started)
        } catch {
            // Not "nothing to do": bundles may be waiting where this run cannot see them.
            logger.critical(
                "the spool cannot be read: the run claims nothing (exit 73)", metadata: ["error": "\(error)"])
            let summary = RunSummary(exitCode: ExitStatus.cannotCreate.rawValue)
            // The 73 above is what matters; the run's own record is for `status`.
            try? await checkpoints.recordRunFinished(runID: runID, summary: summary, healthy: nil, apiLookups: nil)
            return await endedBeforeStarting(spool, started: started)
        }
        work.logWhatIsNotDue(minAge: options.minAge, logger: logger)
        let lookups = LookupSupport()
        let idleCheckFailed = await upload(
            work, spool: spool, checkpoints: checkpoints, claims: claims, counters: counters, lookups: lookups,
            started: started)
        let state = counters.snapshot
        var summary = state.summary
        summary.heldByMinAge = work.incoming.heldByMinAge.count
        summary.seconds = (ContinuousClock.now - started) / .seconds(1)
        let status = idleCheckFailed ?? state.exitStatus
        summary.exitCode = status.rawValue
        await recordEnd(
            of: runID, summary: summary, apiChecked: state.idleCheckPassed, syncSeconds: state.syncSeconds,
            lookups: lookups, spool: spool, checkpoints: checkpoints)
        return (summary, status)
    }

    /// A run that finds nothing due but bundles held by `min-age` waits for the first to come
    /// due, then lists `incoming/` again: the run that `dopesync.path` starts at a bundle's rename
    /// then uploads it `min-age` later, where it used to leave it to the timer's next run (up to
    /// 6 minutes). It waits only within `max-time`; without one, once. A stop ends the wait.
    private func waitingForHeldBundles(
        _ listed: DueWork, spool: Spool, checkpoints: any CheckpointStorage, started: ContinuousClock.Instant
    ) async throws -> DueWork {
        var work = listed
        var waits = 0
        while work.bundles.isEmpty, let comesDue = work.incoming.firstHeldComesDue {
            let wait = Duration.milliseconds(Int64(max(comesDue.timeIntervalSinceNow, 0) * 1000) + 50)
            if let maxTime = options.maxTime {
                // With a second to spare: a wait that ends at max-time would leave no time to claim.
                guard options.clock() + wait + .seconds(1) <= started + maxTime else { break }
            } else if waits > 0 {
                break
            }
            logger.notice(
                "nothing due yet: waiting for a bundle modified within min-age",
                metadata: [
                    "held.by.min.age": "\(work.incoming.heldByMinAge.count)", "min.age": "\(options.minAge)",
                    "wait.seconds": "\(String(format: "%.1f", wait / .seconds(1)))",
                ])
            guard await options.stop.sleep(for: wait, endsAtRequest: true) == .timeUp else { break }
            waits += 1
            work = try await DueWork.list(spool, checkpoints: checkpoints, minAge: options.minAge, logger: logger)
        }
        return work
    }

    /// Uploads what is due with `--concurrency` slots, or, with nothing to upload, checks the API
    /// (`dopesync check`'s look), so that a timer's idle runs still find a wrong URL, a refused
    /// token or an outage, and the metrics' last success means the API was reached. The exit
    /// status of a failed idle check; nil otherwise.
    private func upload(
        _ work: DueWork, spool: Spool, checkpoints: any CheckpointStorage, claims: any ClaimStorage,
        counters: RunCounters,
        lookups: LookupSupport,
        started: ContinuousClock.Instant
    ) async -> ExitStatus? {
        let queue = BundleQueue(counters.shouldStop ? [] : work.bundles)
        let total = min(work.bundles.count, options.maxBundles ?? Int.max)
        let idle = work.bundles.isEmpty && !counters.shouldStop
        let clientResult: ExitStatus?? = try? await APIClient.with(
            baseURL: options.apiURL, credential: Credential(token: options.token, source: options.tokenSource),
            connections: options.concurrency, network: options.network, stop: options.stop,
            eventLoopGroup: placement.group
        ) { client -> ExitStatus? in
            let api: String
            switch await bindAPI(client, checkpoints: checkpoints) {
            case .success(let bound): api = bound
            case .failure(let refused): return refused.status
            }
            if idle && options.probeWhenIdle {
                let (lines, status) = await CheckCommand.probe(client)
                for line in lines where !line.ok {
                    logger.error(
                        "nothing to upload, but the API check failed (exit \(status))", metadata: ["check": "\(line)"])
                }
                if status == .success { _ = counters.report(\.idleCheckPassed) }
                return status == .success ? nil : status
            }
            // A batch commits, without anyone waiting for it, once as many results wait as the
            // bundles in flight may hold unsettled.
            let batchSize = max(options.concurrency, 1) * BundleUploadState.unsettledResults
            await GroupCommit.with(storage: checkpoints, batchSize: batchSize) { results in
                let slot = UploadSlot(
                    arrivals: work.arrivals, queue: queue, spool: spool, claims: claims,
                    uploader: makeUploader(
                        client, api: api, results: results, checkpoints: checkpoints, claims: claims,
                        counters: counters,
                        lookups: lookups),
                    counters: counters, deadline: options.maxTime.map { (options.clock, started + $0) },
                    maxBundles: options.maxBundles ?? Int.max, minFreeSpace: options.minFreeSpace, logger: logger)
                await withTaskGroup(of: Void.self) { progressGroup in
                    if options.showProgress {
                        progressGroup.addTask { await Self.showProgress(counters, total: total, started: started) }
                    }
                    await withTaskGroup(of: Void.self) { group in
                        for _ in 0..<max(options.concurrency, 1) { group.addTask { await slot.run() } }
                    }
                    progressGroup.cancelAll()
                }
                let (transactions, committed) = results.committed
                logger.debug(
                    "step results committed",
                    metadata: ["results": "\(committed)", "transactions": "\(transactions)"])
            }
            return nil
        }
        if clientResult == nil { logger.error("the HTTP client could not be shut down cleanly") }
        return clientResult ?? nil
    }

    /// Why a run claims nothing: the API's binding refused it.
    private struct Refused: Error {
        let status: ExitStatus
    }

    /// Which API this run's checkpoints are recorded against (``APIBinding``). A URL new to a
    /// store that holds other APIs' checkpoints is taken only where the API can look records up:
    /// else the run claims nothing (78) until the operator says which API it is (`dopesync api`).
    private func bindAPI(_ client: APIClient, checkpoints: any CheckpointStorage) async -> Result<String, Refused> {
        let url = APIAddress.normalized(options.apiURL)
        do throws(CheckpointError) {
            var book = try await checkpoints.apiBook(countingSessions: false)
            if book.addresses[url] == nil { book = try await checkpoints.apiBook(countingSessions: true) }
            switch APIBinding.decide(url: url, book: book) {
            case .known(let api):
                if api != url {
                    logger.info("the API is at a new address", metadata: ["api": "\(api)", "address": "\(url)"])
                }
                return .success(api)
            case .record(let api):
                try await checkpoints.recordAPIAddress(url, api: api, adoptUnbound: true)
                return .success(api)
            case .needsLookups(let others):
                let answer =
                    options.lookBeforeResending
                    ? await client.get(APIClient.lookupOfNoRecord)
                    : .notFound(status: 0)
                switch answer {
                case .found:
                    logger.notice(
                        "checkpoints recorded against another API: each of their steps is looked up on this one before anything is sent",
                        metadata: ["api": "\(url)", "other.apis": "\(others.joined(separator: ", "))"])
                    try await checkpoints.recordAPIAddress(url, api: url, adoptUnbound: true)
                    return .success(url)
                case .notFound:
                    logger.critical(
                        "\(APIBinding.refusal(url: url, others: others, book: book, spoolRoot: options.spoolRoot))")
                    return .failure(Refused(status: .configuration))
                case .failed:
                    let (lines, status) = await CheckCommand.probe(client)
                    for line in lines where !line.ok {
                        logger.error("the API check failed", metadata: ["check": "\(line)"])
                    }
                    logger.critical(
                        "cannot tell whether the API can look records up, which its checkpoints from another API need: the run claims nothing",
                        metadata: ["api": "\(url)"])
                    return .failure(Refused(status: status == .success ? .temporaryFailure : status))
                }
            }
        } catch {
            logger.critical(
                "the checkpoint store cannot say which API its checkpoints belong to: the run claims nothing",
                metadata: ["error": "\(error)"])
            return .failure(Refused(status: error.isUnreachable ? .temporaryFailure : .cannotCreate))
        }
    }

    /// One uploader for all the run's bundles, with what they share: the group commit, the
    /// lookups' support, the reference lists.
    private func makeUploader(
        _ client: APIClient, api: String, results: GroupCommit, checkpoints: any CheckpointStorage,
        claims: any ClaimStorage, counters: RunCounters, lookups: LookupSupport
    ) -> BundleUploader {
        var uploader = BundleUploader(
            checkpoints: checkpoints, claims: claims, results: results,
            client: client, retry: options.retry, deferral: options.deferral, limits: options.limits,
            counters: counters, isolatedReader: options.isolatedReader.map(IsolatedReading.init(executable:)),
            lookup: options.lookBeforeResending
                ? ServerLookup(client: client, support: lookups, counters: counters, logger: logger) : nil,
            api: api, logger: logger)
        if options.checkReferencesFirst {
            uploader.references = ReferenceCatalog(
                client: client, checkpoints: checkpoints, retry: options.retry, counters: counters, logger: logger)
        }
        return uploader
    }

    /// The run's own record, for `status` and the metrics' last success, and the metrics file.
    /// The bundles' fate is already recorded and in their folders, so a failure here changes
    /// nothing they need: it is logged.
    private func recordEnd(
        of runID: String, summary: RunSummary, apiChecked: Bool, syncSeconds: [Double], lookups: LookupSupport,
        spool: Spool, checkpoints: any CheckpointStorage
    ) async {
        // With a metrics file the backlog is listed first: it decides whether this run was healthy.
        let now = Date()
        var backlog: Result<SpoolBacklog, any Error>? = nil
        if options.metricsFile != nil {
            do {
                let inFlight = try await checkpoints.bundlesInFlight()
                backlog = await SpoolCalls.run {
                    Result { try RunMetrics.backlog(of: spool, inFlight: inFlight, now: now) }
                }
            } catch {
                backlog = .failure(error)
            }
        }
        // A backlog that could not be listed leaves health unknown here; its error is logged below.
        let healthy = (try? backlog?.get()).map {
            RunMetrics.isHealthy(
                summary, waitingForRetry: $0.waitingForRetry(now: now),
                apiChecked: apiChecked && $0.waitingOnTheAPI(now: now) == 0)
        }
        let apiLookups: Bool? =
            switch lookups.current {
            case .available: true
            case .missing: false
            case .unknown: nil
            }
        try? await checkpoints.recordRunFinished(
            runID: runID, summary: summary, healthy: healthy, apiLookups: apiLookups)
        guard let metricsFile = options.metricsFile, let backlog else { return }
        do {
            let lastSuccessAt = try await checkpoints.lastHealthyRunFinishedAt(
                notAfter: WallClock.latestBelievable(at: now))
            let listed = try backlog.get()
            var metrics = RunMetrics(
                finishedAt: now, lastSuccessAt: lastSuccessAt, summary: summary, backlog: listed,
                floor: options.minFreeSpace)
            metrics.syncSeconds = syncSeconds
            // Unknown when the store cannot say: the file is written all the same.
            metrics.halfSessions = (try? await checkpoints.halfSessions()).map {
                SpoolStatus.halfSessions($0, in: listed, now: now)
            }
            try await SpoolCalls.run { [metrics] () throws(any Error) in try metrics.write(to: metricsFile) }
        } catch {
            logger.error(
                "cannot write the metrics file", metadata: ["metrics.file": "\(metricsFile)", "error": "\(error)"])
        }
    }
}

/// The spool's SQLite checkpoints are being migrated (``StoreLock``): a run waits for the next timer.
private struct MigrationUnderWay: Error {}

/// What a run may take, listed once at its start: orphans of dead runs first (claimed earlier),
/// then what is due in `incoming/`, with when the worker first saw each.
struct DueWork {
    let orphans: [SpoolEntry]
    let incoming: IncomingQueue
    /// When the worker first saw each bundle it may take: the metrics' time from drop to done/.
    let arrivals: [String: Date]

    var bundles: [SpoolEntry] { orphans + incoming.due }

    static func list(_ spool: Spool, checkpoints: any CheckpointStorage, minAge: Duration, logger: Logger)
        async throws -> DueWork
    {
        let (orphans, listing, renamed) = try await SpoolCalls.run { () throws(SpoolError) in
            var listing = try spool.list(.incoming)
            // A name that is not UTF-8 is renamed first (rare), then the folder listed again.
            let renamed = spool.renameNonUTF8Names(listing)
            if renamed.contains(where: { $0.now != nil }) { listing = try spool.list(.incoming) }
            return (try spool.processingEntries(), listing, renamed)
        }
        for bundle in renamed {
            if let now = bundle.now {
                logger.notice(
                    "a bundle's name was not UTF-8: renamed to one the worker can write, and processed",
                    metadata: ["was": "incoming/\(bundle.was)", "now": "incoming/\(now)"])
            } else {
                logger.error(
                    "a bundle's name is not UTF-8 and it cannot be renamed to one the worker can write: it waits in incoming/; rename it by hand",
                    metadata: [
                        "was": "incoming/\(bundle.was)",
                        "error": "\(bundle.errno.map { String(cString: strerror($0)) } ?? "-")",
                    ])
            }
        }
        let states = try await checkpoints.bundlesInFlight()
        let incoming = IncomingQueue(incoming: listing, states: states, now: Date(), minAge: minAge)
        var arrivals: [String: Date] = [:]
        for entry in orphans + incoming.due {
            arrivals[entry.name] = IncomingQueue.arrival(of: entry, state: states[entry.name])
        }
        return DueWork(orphans: orphans, incoming: incoming, arrivals: arrivals)
    }

    func logWhatIsNotDue(minAge: Duration, logger: Logger) {
        for (entry, ahead) in incoming.mtimeInFuture {
            logger.warning(
                "a bundle's mtime is in the future (its producer's clock is ahead): min-age counts from its arrival",
                metadata: [
                    "bundle.name": "\(entry.name)", "mtime.ahead": "\(SpoolStatus.age(ahead))",
                ])
        }
        for (entry, ahead) in incoming.deferredAhead {
            logger.warning(
                "a bundle was deferred at a time this clock has not reached (the clock went back since): it is due now",
                metadata: [
                    "bundle.name": "\(entry.name)", "deferred.ahead": "\(SpoolStatus.age(ahead))",
                ])
        }
        guard !incoming.heldByMinAge.isEmpty || !incoming.waitingForRetry.isEmpty else { return }
        logger.info(
            "not due yet",
            metadata: [
                "held.by.min.age": "\(incoming.heldByMinAge.count)", "min.age": "\(minAge)",
                "waiting.for.retry": "\(incoming.waitingForRetry.count)",
            ])
    }
}

extension Worker {
    /// Redraws one line on standard error twice a second until cancelled.
    static func showProgress(_ counters: RunCounters, total: Int, started: ContinuousClock.Instant) async {
        while !Task.isCancelled {
            let summary = counters.snapshot.summary
            let seconds = max((ContinuousClock.now - started) / .seconds(1), 0.001)
            let line =
                "\r\u{1B}[2K\(summary.done + summary.failed + summary.deferred)/\(total) bundles "
                + "(\(summary.done) done, \(summary.failed) failed, \(summary.deferred) deferred), "
                + "\(summary.requests) requests, \(ByteCount(summary.bytes)) at \(ByteRate.text(Double(summary.bytes) / seconds)), "
                + "\(Int(Double(summary.requests) / seconds)) req/s"
            FileHandle.standardError.write(Data(line.utf8))
            do { try await sleepOnLoop(for: .milliseconds(500)) } catch { break }  // cancelled: the run is over
        }
        FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8))
    }
}

extension RunSummary {
    /// The one summary line a run ends with.
    public var line: String {
        "run finished: \(claimed) claimed, \(done) done, \(deferred) deferred, \(failed) failed"
            + (givenBack > 0 ? ", \(givenBack) given back" : "")
            + (heldByMinAge > 0 ? ", \(heldByMinAge) not yet due (modified within min-age)" : "") + "; "
            + "\(requests) requests, \(ByteCount(bytes)) sent at \(ByteRate.text(Double(bytes) / max(seconds, 0.001))); "
            + "\(String(format: "%.1f", seconds)) s"
    }
}
