import Foundation
import Logging
import Synchronization

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
        /// A bundle could not be moved out of `processing/` (``BundleDisposition/moveFailed``).
        var moveFailed = false
        /// The spool's folders refuse moves or the sessions' holds as such (read-only, no
        /// permission, full, another file system, I/O errors): no bundle could be moved or held,
        /// so the run stops claiming.
        var spoolNotWritable = false
        /// A bundle's session could not be held for a reason other than the spool (no descriptor
        /// left, say): it went back uncounted, and the run exits 75, so that a lasting cause is
        /// not a quiet 0.
        var sessionHoldFailed = false
        /// A bundle could not be claimed for a reason of the machine's (no descriptor left): it
        /// waits where it is, and the run exits 75, not a quiet 0.
        var claimFailed = false
        /// Nothing was due, and the idle run's look at the API (health and token) passed.
        var idleCheckPassed = false
        /// The checkpoint database failed as a whole (``CheckpointError/isDatabaseFailure``).
        var checkpointsFailed = false
        /// The shared database (PostgreSQL) could not be reached (``CheckpointError/isUnreachable``).
        var databaseUnreachable = false
        var breaker: CircuitBreaker

        /// What the run exits with: the first reason it stopped for, in order of what a person
        /// must fix first; else whether a bundle failed.
        var exitStatus: ExitStatus {
            if credentialsRefused { return .permissionDenied }
            if apiNotTrusted { return .apiNotTrusted }
            if apiMisdirected { return .configuration }
            if checkpointsFailed || belowFreeSpaceFloor || moveFailed || spoolNotWritable { return .cannotCreate }
            if breaker.isOpen || databaseUnreachable || sessionHoldFailed || claimFailed { return .temporaryFailure }
            return summary.failed > 0 ? .bundlesFailed : .success
        }
    }
    let runID: String
    let stop: StopRequest
    private let state: Mutex<State>
    private let createdSinceTokenChange = Atomic(false)

    init(runID: String, breaker: CircuitBreaker.Policy, stop: StopRequest) {
        self.runID = runID
        self.stop = stop
        self.state = Mutex(State(breaker: CircuitBreaker(policy: breaker)))
    }

    var shouldStop: Bool {
        stop.isRequested
            || state.withLock {
                $0.credentialsRefused || $0.apiNotTrusted || $0.apiMisdirected || $0.checkpointsFailed
                    || $0.databaseUnreachable || $0.belowFreeSpaceFloor || $0.spoolNotWritable
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

    /// A create went through (with the token as it is): evidence that the token works, for an
    /// API with nothing else to ask about it (``APIClient/verdict(_:tokenCreatedThisRun:)``). An
    /// atomic flag, not the state's lock: every request sets it, and one load keeps it cheap.
    func recordCreate() {
        if !createdSinceTokenChange.load(ordering: .relaxed) { createdSinceTokenChange.store(true, ordering: .relaxed) }
    }

    /// The token was read anew and differs: what went through before says nothing of it.
    func tokenChanged() { createdSinceTokenChange.store(false, ordering: .relaxed) }

    /// Whether a create went through since the token last changed in this run.
    var createdWithCurrentToken: Bool { createdSinceTokenChange.load(ordering: .relaxed) }

    /// Sets a reason the run stops for; true for its first report only (one log line a run).
    func report(_ reason: any WritableKeyPath<State, Bool> & Sendable) -> Bool {
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
typealias BundleQueue = WorkQueue<SpoolEntry>
