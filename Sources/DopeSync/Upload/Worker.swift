import Foundation
import Logging
import Synchronization

/// What `dopesync run` was asked to do.
public struct RunOptions: Sendable {
    public var spoolRoot: String
    public var apiURL: String
    public var token: String
    public var concurrency = 4
    public var maxBundles: Int?
    public var maxTime: Duration?
    public var minAge: Duration = .seconds(5)
    public var limits = BundleLimits.default
    public var retry = RetryPolicy()
    /// When a deferred bundle is due again, and after how many attempts or how long it fails.
    public var deferral = DeferralPolicy()
    /// When the run stops claiming because the API is down or most requests fail (exit 75).
    public var breaker = CircuitBreaker.Policy()
    /// Set by SIGINT/SIGTERM: stop claiming, let the step in flight finish, give the rest back.
    public var stop = StopRequest()
    /// A live progress line on standard error (for a terminal; cron gets plain log lines).
    public var showProgress = false
    /// Where to write a Prometheus textfile after the run (``RunMetrics``), if anywhere.
    public var metricsFile: String?
    /// A `dopesync` executable that reads a bundle in a process of its own (`inspect`), for bundles
    /// whose last reading never ended; nil reads them in-process (see ``IsolatedReading``).
    public var isolatedReader: String?
    /// Look on the server before sending a step whose request may already have reached it (and
    /// once per new bundle, before its session): exactly once even against an API that ignores
    /// `Idempotency-Key`. Off: keys alone (for measuring what the looks cost).
    public var lookBeforeResending = true
    /// Check the ids a bundle names against the server's reference lists before its first
    /// request (``ReferenceCatalog``). Off: the creates' 422s find them (for measuring the cost).
    public var checkReferencesFirst = true
    /// Extra trusted roots, a proxy and a cap on the upload rate.
    public var network = APIClient.Network()
    /// The free space the spool's file system must keep: below it the run claims nothing more.
    /// None by default in the library (`dopesync run`'s default is ``FreeSpaceFloor/default``).
    public var minFreeSpace = FreeSpaceFloor.bytes(0)
    /// How long `prune` keeps bundles in done/: what a run below the floor says prune would free.
    public var pruneAfter: Duration = .seconds(30 * 86_400)
    /// With nothing to upload, check that the API is there and takes the token (one `GET
    /// /api/health` and one lookup); off only for measuring the upload path alone.
    public var probeWhenIdle = true
    /// Create the spool when its folder does not exist (`--create-spool`); else a missing spool is
    /// an error (exit 73): a mistyped path must not become an empty spool and a run that did nothing.
    public var createSpool = false
    /// Run as root on a spool that belongs to another user (`--allow-root`); else refused, since
    /// what root creates there the service's own user could not use.
    public var allowRoot = false
    /// How long a checkpoint write waits for another process's write (then the run stops, exit 73).
    public var checkpointBusyTimeout: Duration = .seconds(10)

    /// Where a fresh token comes from when the API refuses it (the token itself is ``token``).
    public var tokenSource = Credential.Source.fixed

    public init(spoolRoot: String, apiURL: String, token: String) {
        self.spoolRoot = spoolRoot
        self.apiURL = apiURL
        self.token = token
    }
}

/// A request to stop a run early, safe to set from a signal handler's queue.
public final class StopRequest: Sendable {
    private let flag = Atomic<Bool>(false)
    public init() {}
    public func request() { flag.store(true, ordering: .relaxed) }
    public var isRequested: Bool { flag.load(ordering: .relaxed) }
}

/// The run's shared counters and stop flags, behind one lock.
final class RunCounters: Sendable {
    struct State {
        var summary = RunSummary()
        var credentialsRefused = false
        /// The API's certificate could not be trusted: no request can go until an operator acts.
        var apiNotTrusted = false
        /// The API URL does not lead to the API (a redirect, HTML, the session collection's 404).
        var apiMisdirected = false
        /// For each bundle done, the seconds from its arrival to done/ (the metrics' histogram).
        var syncSeconds: [Double] = []
        /// Claims made or being made (``reserveClaim(limit:)``), for `--max-bundles`.
        var claimsReserved = 0
        /// The spool's file system fell below `min-free-space`.
        var belowFreeSpaceFloor = false
        /// The checkpoint database failed as a whole (``CheckpointError/isDatabaseFailure``).
        var checkpointsFailed = false
        var breaker: CircuitBreaker

        /// What the run exits with: the first reason it stopped for, in order of what a person
        /// must fix first; else whether a bundle failed.
        var exitStatus: ExitStatus {
            if credentialsRefused { return .permissionDenied }
            if apiNotTrusted { return .apiNotTrusted }
            if apiMisdirected { return .configuration }
            if checkpointsFailed || belowFreeSpaceFloor { return .cannotCreate }
            if breaker.isOpen { return .temporaryFailure }
            return summary.failed > 0 ? .bundlesFailed : .success
        }
    }
    let runID: String
    let stop: StopRequest
    private let state: Mutex<State>

    init(runID: String, breaker: CircuitBreaker.Policy, stop: StopRequest) {
        self.runID = runID
        self.stop = stop
        self.state = Mutex(State(breaker: CircuitBreaker(policy: breaker)))
    }

    var shouldStop: Bool {
        stop.isRequested
            || state.withLock {
                $0.credentialsRefused || $0.apiNotTrusted || $0.apiMisdirected || $0.checkpointsFailed
                    || $0.belowFreeSpaceFloor
                    || $0.breaker.isOpen
            }
    }
    var snapshot: State { state.withLock { $0 } }

    func request(bytes: Int64) {
        state.withLock {
            $0.summary.requests += 1
            $0.summary.bytes += bytes
        }
    }

    /// A step the server took or answered for good (4xx).
    func stepAnswered() { state.withLock { _ = $0.breaker.record(.stepAnswered) } }

    /// A step gave up after its retries; returns the breaker's reason when this opened it.
    func stepKeptFailing(answered: Bool) -> String? {
        state.withLock { $0.breaker.record(.stepKeptFailing(answered: answered)) }
    }

    func credentialsRefused() { state.withLock { $0.credentialsRefused = true } }

    /// Sets a reason the run stops for; true for its first report only (one log line a run).
    func report(_ reason: WritableKeyPath<State, Bool> & Sendable) -> Bool {
        state.withLock { state in
            defer { state[keyPath: reason] = true }
            return !state[keyPath: reason]
        }
    }

    func record(_ outcome: UploadOutcome) {
        state.withLock {
            switch outcome {
            case .done: $0.summary.done += 1
            case .failed: $0.summary.failed += 1
            case .deferred: $0.summary.deferred += 1
            case .returned: $0.summary.givenBack += 1
            }
        }
    }

    func claimed() { state.withLock { $0.summary.claimed += 1 } }

    /// A bundle reached done/ this long after the worker first saw it.
    func synced(after seconds: Double) { state.withLock { $0.syncSeconds.append(seconds) } }

    /// Reserves one claim of at most `limit` for the run; false when they are all taken.
    func reserveClaim(limit: Int) -> Bool {
        state.withLock { state in
            guard state.claimsReserved < limit else { return false }
            state.claimsReserved += 1
            return true
        }
    }

    /// A reserved claim that was not made (the bundle was gone, or another run had it).
    func releaseClaim() { state.withLock { $0.claimsReserved -= 1 } }
}

/// The bundles a run will try, handed out one at a time to its concurrent uploaders.
final class BundleQueue: Sendable {
    private let entries: Mutex<ArraySlice<SpoolEntry>>
    init(_ entries: [SpoolEntry]) { self.entries = Mutex(entries[...]) }
    func next() -> SpoolEntry? { entries.withLock { $0.popFirst() } }
}

/// `dopesync run`: one batch over the spool, for cron or a systemd timer.
public struct Worker: Sendable {
    public let options: RunOptions
    public let logger: Logger

    public init(options: RunOptions, logger: Logger) {
        self.options = options
        self.logger = logger
    }

    /// Processes what is due (orphans first), then returns the summary and the exit status.
    public func run() async -> (RunSummary, ExitStatus) {
        let started = ContinuousClock.now
        let spool = Spool(root: options.spoolRoot)
        let store: CheckpointStore
        do {
            try spool.checkBeforeWriting(mayCreate: options.createSpool, allowRoot: options.allowRoot)
            try spool.create()
            store = try CheckpointStore(
                spool: spool,
                busyTimeoutMilliseconds: Int32(
                    min(max(options.checkpointBusyTimeout / .milliseconds(1), 1), Double(Int32.max))))
        } catch let error as SpoolError where error.code == .runningAsRoot {
            // Nothing written at all: a metrics file made by root would be root's too.
            logger.critical(
                "the spool cannot be used", metadata: ["spool": "\(options.spoolRoot)", "error": "\(error)"])
            return (RunSummary(exitCode: ExitStatus.cannotCreate.rawValue), .cannotCreate)
        } catch {
            logger.critical(
                "the spool cannot be used", metadata: ["spool": "\(options.spoolRoot)", "error": "\(error)"])
            return endedBeforeStarting(spool, started: started)
        }
        // From here on every checkpoint goes through the writer's own thread, never an event loop's.
        return await CheckpointWriter.with(store) { checkpoints in
            await run(spool: spool, checkpoints: checkpoints, started: started)
        }
    }

    /// The spool's file system is below `min-free-space`: the run claims nothing (exit 73), and says
    /// how much is free and what `prune` would free (by the store's done times, as `prune` goes).
    func reportBelowFloor(
        _ space: FileSystemSpace, spool: Spool, checkpoints: CheckpointWriter, counters: RunCounters
    ) async {
        guard counters.report(\.belowFreeSpaceFloor) else { return }
        let done = (try? spool.list(.done)) ?? []
        let doneAt =
            (try? await checkpoints.perform { try $0.doneTimes() }) ?? [:]
        let old = PruneCommand.prunable(
            done, doneAt: doneAt, before: Date().addingTimeInterval(-(options.pruneAfter / .seconds(1))))
        logger.critical(
            "the spool's file system is below its free-space floor: the run claims nothing and gives back what it holds (exit 73)",
            metadata: [
                "free": "\(ByteCount(space.free))",
                "floor": "\(options.minFreeSpace) (\(ByteCount(options.minFreeSpace.bytes(ofTotal: space.total))))",
                "prune.frees": .string(
                    "\(ByteCount(old.reduce(0) { $0 + $1.size })) in \(old.count) bundles "
                        + "(done over \(SpoolStatus.age(options.pruneAfter / .seconds(1))) ago)"),
                "done": "\(ByteCount(done.reduce(0) { $0 + $1.size })) in \(done.count) bundles",
                "spool": "\(spool.root)",
            ])
    }

    /// The end of a run that could not use its spool or database (exit 73): nothing was claimed.
    /// The metrics file is written all the same, where the disk allows, so that it does not go on
    /// showing the run before; the last success time is taken from it, the database being unusable.
    private func endedBeforeStarting(_ spool: Spool, started: ContinuousClock.Instant) -> (RunSummary, ExitStatus) {
        var summary = RunSummary(exitCode: ExitStatus.cannotCreate.rawValue)
        summary.seconds = (ContinuousClock.now - started) / .seconds(1)
        if let metricsFile = options.metricsFile {
            let now = Date()
            let backlog =
                (try? SpoolBacklog.list(spool, inFlight: [:], now: now))
                ?? SpoolBacklog(listings: [:], folders: [:], inFlight: [:])
            let metrics = RunMetrics(
                finishedAt: now, lastSuccessAt: RunMetrics.lastSuccess(inFile: metricsFile), summary: summary,
                backlog: backlog)
            do {
                try metrics.write(to: metricsFile)
            } catch {
                logger.error(
                    "cannot write the metrics file", metadata: ["metrics.file": "\(metricsFile)", "error": "\(error)"])
            }
        }
        return (summary, .cannotCreate)
    }

    private func run(spool: Spool, checkpoints: CheckpointWriter, started: ContinuousClock.Instant) async -> (
        RunSummary, ExitStatus
    ) {
        let runID = UUID().uuidString.lowercased()
        let counters = RunCounters(runID: runID, breaker: options.breaker, stop: options.stop)
        do throws(CheckpointError) {
            let (host, pid) = (ProcessInfo.processInfo.hostName, ProcessInfo.processInfo.processIdentifier)
            try await checkpoints.perform { try $0.recordRunStarted(runID: runID, host: host, pid: pid) }
        } catch {
            // Only the run's own record otherwise; but a database that cannot be written at all
            // could not checkpoint a single step: claim nothing.
            if error.isDatabaseFailure {
                logger.critical(
                    "the checkpoint database cannot be written: the run claims nothing (exit 73)",
                    metadata: ["error": "\(error)"])
                return endedBeforeStarting(spool, started: started)
            }
        }

        if let space = FileSystemSpace(of: spool.root), space.isBelow(options.minFreeSpace) {
            await reportBelowFloor(space, spool: spool, checkpoints: checkpoints, counters: counters)
        }

        // Orphans of dead runs first (they were claimed earlier), then what is due in incoming/.
        let orphans: [SpoolEntry]
        let incoming: IncomingQueue
        // When the worker first saw each bundle it may take: the metrics' time from drop to done/.
        var arrivals: [String: Date] = [:]
        do {
            orphans = try spool.processingEntries()
            let listing = try spool.list(.incoming)
            let states = try await checkpoints.perform { try $0.bundlesInFlight() }
            incoming = IncomingQueue(incoming: listing, states: states, now: Date(), minAge: options.minAge)
            for entry in orphans + incoming.due {
                arrivals[entry.name] = IncomingQueue.arrival(of: entry, state: states[entry.name])
            }
        } catch {
            // Not "nothing to do": bundles may be waiting where this run cannot see them.
            logger.critical(
                "the spool cannot be read: the run claims nothing (exit 73)", metadata: ["error": "\(error)"])
            let summary = RunSummary(exitCode: ExitStatus.cannotCreate.rawValue)
            // The 73 above is what matters; the run's own record is for `status`.
            try? await checkpoints.perform { try $0.recordRunFinished(runID: runID, summary: summary) }
            return (summary, .cannotCreate)
        }
        let due = incoming.due
        if !incoming.heldByMinAge.isEmpty || !incoming.waitingForRetry.isEmpty {
            logger.info(
                "not due yet",
                metadata: [
                    "held.by.min.age": "\(incoming.heldByMinAge.count)", "min.age": "\(options.minAge)",
                    "waiting.for.retry": "\(incoming.waitingForRetry.count)",
                ])
        }
        let queue = BundleQueue(counters.shouldStop ? [] : orphans + due)
        let total = min(orphans.count + due.count, options.maxBundles ?? Int.max)
        let deadline = options.maxTime.map { started + $0 }
        let maxBundles = options.maxBundles ?? Int.max

        let lookups = LookupSupport()
        let idle = orphans.isEmpty && due.isEmpty && !counters.shouldStop
        let clientResult: ExitStatus?? = try? await APIClient.with(
            baseURL: options.apiURL, credential: Credential(token: options.token, source: options.tokenSource),
            connections: options.concurrency, network: options.network
        ) { client -> ExitStatus? in
            // Nothing to upload: one look that the API is there and takes the token (`dopesync
            // check`'s), so a timer's idle runs still find a wrong URL, a refused token or an
            // outage, and the metrics' last success means the API was reached.
            if idle && options.probeWhenIdle {
                let (lines, status) = await CheckCommand.probe(client)
                for line in lines where !line.ok {
                    logger.error(
                        "nothing to upload, but the API check failed (exit \(status))", metadata: ["check": "\(line)"])
                }
                return status == .success ? nil : status
            }
            let results = GroupCommit(writer: checkpoints, batchSize: options.concurrency)
            var uploader = BundleUploader(
                checkpoints: checkpoints, results: results, client: client, retry: options.retry,
                deferral: options.deferral, limits: options.limits, counters: counters,
                isolatedReader: options.isolatedReader.map(IsolatedReading.init(executable:)),
                lookup: options.lookBeforeResending
                    ? ServerLookup(client: client, support: lookups, counters: counters, logger: logger) : nil,
                logger: logger)
            if options.checkReferencesFirst {
                uploader.references = ReferenceCatalog(
                    client: client, checkpoints: checkpoints, retry: options.retry, counters: counters, logger: logger)
            }
            await withTaskGroup(of: Void.self) { progressGroup in
                if options.showProgress {
                    progressGroup.addTask { await Self.showProgress(counters, total: total, started: started) }
                }
                await withTaskGroup(of: Void.self) { group in
                    let slot = UploadSlot(
                        arrivals: arrivals,
                        queue: queue, spool: spool, uploader: uploader, counters: counters, deadline: deadline,
                        maxBundles: maxBundles, minFreeSpace: options.minFreeSpace, logger: logger)
                    for _ in 0..<max(options.concurrency, 1) {
                        group.addTask { await slot.run() }
                    }
                }
                progressGroup.cancelAll()
            }
            return nil
        }
        if clientResult == nil { logger.error("the HTTP client could not be shut down cleanly") }
        let idleCheckFailed = clientResult ?? nil

        let state = counters.snapshot
        var summary = state.summary
        summary.heldByMinAge = incoming.heldByMinAge.count
        summary.seconds = (ContinuousClock.now - started) / .seconds(1)
        let status = idleCheckFailed ?? state.exitStatus
        summary.exitCode = status.rawValue
        // With a metrics file the backlog is listed first: it decides whether this run was healthy.
        let now = Date()
        var backlog: Result<SpoolBacklog, any Error>? = nil
        if options.metricsFile != nil {
            do {
                let inFlight = try await checkpoints.perform { try $0.bundlesInFlight() }
                backlog = Result { try RunMetrics.backlog(of: spool, inFlight: inFlight, now: now) }
            } catch {
                backlog = .failure(error)
            }
        }
        // A backlog that could not be listed leaves health unknown here; its error is logged below.
        let healthy = (try? backlog?.get()).map {
            RunMetrics.isHealthy(summary, waitingForRetry: $0.waitingForRetry(now: now))
        }
        let apiLookups: Bool? =
            switch lookups.current {
            case .available: true
            case .missing: false
            case .unknown: nil
            }
        let finished = summary
        // The run's own record, for `status` and the metrics' last success: the bundles' fate is
        // already recorded and in their folders, so a failure here changes nothing they need.
        try? await checkpoints.perform {
            try $0.recordRunFinished(runID: runID, summary: finished, healthy: healthy, apiLookups: apiLookups)
        }
        if let metricsFile = options.metricsFile, let backlog {
            // A metrics file that cannot be written is logged, never a reason to fail the run.
            do {
                let lastSuccessAt = try await checkpoints.perform { try $0.lastHealthyRunFinishedAt() }
                var metrics = RunMetrics(
                    finishedAt: now, lastSuccessAt: lastSuccessAt, summary: summary, backlog: try backlog.get())
                metrics.syncSeconds = state.syncSeconds
                try metrics.write(to: metricsFile)
            } catch {
                logger.error(
                    "cannot write the metrics file", metadata: ["metrics.file": "\(metricsFile)", "error": "\(error)"])
            }
        }
        return (summary, status)
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
            do { try await Task.sleep(for: .milliseconds(500)) } catch { break }  // cancelled: the run is over
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
