import DopeSyncBundle
import DopeSyncSupport
import Foundation
import Synchronization

/// How a run holds a bundle against the other workers, beside the spool's own claim (the flock
/// and rename into `processing/`, ``ClaimedBundle``): a lease with an epoch in the PostgreSQL
/// database several hosts share (`PostgresCheckpoints`), or nothing more on one host
/// (``SpoolClaims``), where the flock alone is the claim.
///
/// Every write about a claimed bundle is fenced: a store that holds claims as leases refuses
/// it, changing nothing, once this worker's lease on the bundle is gone
/// (``CheckpointError/Code/leaseLost``).
public protocol ClaimStorage: Sendable {
    /// Takes the claim of `name` in the store before the spool's own claim (the rename into
    /// `processing/`): false when another worker holds it (then the bundle is left alone).
    /// `orphan`: the bundle is in `processing/`, left by a worker whose claim may have run out.
    /// `modified`: the file's mtime as listed; a deferral recorded before it (the file touched or
    /// written anew since it was given back) holds it no more, as ``IncomingQueue`` reads it.
    func acquireClaim(of name: String, orphan: Bool, modified: Date, owner: ClaimOwner) async throws(CheckpointError)
        -> Bool
    /// Whether this worker's claim of `name` took over a lease that ran out: then, and only then,
    /// a lock still held on the file in `processing/` is a paused worker's of this store, and is
    /// no reason to leave it. A lock with no expired lease behind it is a claim made outside the
    /// store (another store's run, an older dopesync): never taken over.
    func tookOverExpiredLease(of name: String) -> Bool
    /// Whether this worker may still send requests for `name` and move it, by its own monotonic
    /// clock. Checked before every request and as each part of a body is ready: cheap, no I/O.
    func holdsClaim(of name: String) -> Bool
    /// Whether a claim can run out while this process lives (a lease): then every request body
    /// is sent behind ``holdsClaim(of:)``, asked as each part is ready, after the request's head.
    var claimsRunOut: Bool { get }
    /// Checks with the store that the claim of `name` is still this worker's, just before a move.
    func confirmClaim(of name: String) async -> Bool
    /// Ends the claim of `name` without an outcome (the bundle stays where it is, or its spool
    /// claim failed): another worker may take it at once.
    func releaseClaim(of name: String) async
    /// Holds `sessionID` for the claimed bundle while it uploads (``SessionHold``): busy while
    /// another bundle of the session holds it.
    func holdSession(_ sessionID: String, of claimed: ClaimedBundle) async -> SessionHoldOutcome
}

/// One host's claims: the spool's `flock` on the claimed file, which the kernel drops when the
/// process dies. A claim is held for as long as the process lives, and there is nothing to take,
/// renew or fence.
public final class SpoolClaims: ClaimStorage {
    /// Whether a run of an older version may share the spool (``OlderRunsWatch``).
    private let olderRuns: Mutex<OlderRunsWatch>

    /// `othersHeldTheStoreLock`: whether another process held the checkpoints' lock when this run
    /// took it (``StoreLock/othersHeldItWhenTaken``).
    public init(othersHeldTheStoreLock: Bool) {
        olderRuns = Mutex(OlderRunsWatch(seenAtStart: othersHeldTheStoreLock))
    }
    public func acquireClaim(of name: String, orphan: Bool, modified: Date, owner: ClaimOwner)
        async throws(CheckpointError) -> Bool
    { true }
    /// One host holds no leases: a claim never takes over a lock.
    public func tookOverExpiredLease(of name: String) -> Bool { false }
    public func holdsClaim(of name: String) -> Bool { true }
    /// The flock lasts as long as the process: a paused worker still holds its bundles.
    public var claimsRunOut: Bool { false }
    public func confirmClaim(of name: String) async -> Bool { true }
    public func releaseClaim(of name: String) async {}
    /// The session's byte of the spool's `.dopesync.sessions.lock` (``SessionHold``), on the
    /// spool's threads; also `.sessions/ID` once another run, maybe of an older version, has been
    /// seen holding the checkpoints' lock.
    public func holdSession(_ sessionID: String, of claimed: ClaimedBundle) async -> SessionHoldOutcome {
        let spool = claimed.spool
        do {
            let hold = try await SpoolCalls.run { () throws(SpoolError) in
                // Asked and answered under the lock, so no hold goes ahead on a stale "no" while an
                // ask is under way; the others wait the read's milliseconds, once a minute.
                let beside = self.olderRuns.withLock { watch in
                    guard watch.isDue(now: .now) else { return watch.seen }
                    return watch.answered(StoreLock.isHeldByAnotherProcess(spool))
                }
                return try spool.holdSession(sessionID, besideOlderVersions: beside)
            }
            return hold.map { .held($0) } ?? .busy
        } catch {
            return Self.outcome(of: error)
        }
    }

    /// Whether another process holds the checkpoints' lock (a run that may be of a build that
    /// held sessions by `.sessions/ID`, ``SessionHold``): known exactly when the run took that
    /// lock; then, unless it was held, asked of `/proc/locks` at the first hold and at most once a
    /// minute after it until the answer is yes, which is kept. Such a run was started before
    /// this one (the binary is this build's since) and holds that lock once its settings and token
    /// are read, within seconds: the asks are for one that took it after this run did (a run
    /// waiting out min-age takes it long before its first hold). Not at every hold: reading
    /// `/proc/locks` is slow beside a hold (BENCHMARKS.md, "The hold's cost").
    struct OlderRunsWatch {
        static let interval: Duration = .seconds(60)
        private(set) var seen: Bool
        private var asked: ContinuousClock.Instant?

        init(seenAtStart: Bool) {
            seen = seenAtStart
        }

        /// Whether to ask now; if so, the next ask waits ``interval`` from now.
        mutating func isDue(now: ContinuousClock.Instant) -> Bool {
            guard !seen, asked.map({ now - $0 >= Self.interval }) ?? true else { return false }
            asked = now
            return true
        }

        /// Keeps a yes; returns whether one has been seen.
        mutating func answered(_ anotherHolds: Bool) -> Bool {
            seen = seen || anotherHolds
            return seen
        }
    }

    /// Only a file system that cannot lock at all lets a bundle go on without its hold; a spool
    /// that cannot be written stops the run; anything else (no descriptor left, a lock file
    /// removed again and again) gives the bundle back, since going on could send a record twice.
    static func outcome(of error: SpoolError) -> SessionHoldOutcome {
        let errno = error.errno ?? 0
        if error.code == .claimFailed && SpoolError.noLockErrors.contains(errno) {
            return .unavailable(reason: "\(error)")
        }
        // ENOTDIR, EISDIR, ELOOP: `.sessions` a file, `.dopesync.sessions.lock` a folder, either a
        // symbolic link: no run mends them either.
        if error.code == .notWritable
            && (SpoolError.folderWideErrors.contains(errno) || [ENOTDIR, EISDIR, ELOOP].contains(errno))
        {
            return .spoolNotWritable(reason: "\(error)")
        }
        return .failed(reason: "\(error)")
    }
}

/// What a run asks of its checkpoint store, whichever store it is: the SQLite file in the spool
/// (``CheckpointWriter``, one host) or the PostgreSQL database that several hosts share
/// (`PostgresCheckpoints`). The upload code talks to this alone, and to ``ClaimStorage`` for
/// its claims.
public protocol CheckpointStorage: Sendable {
    /// Whether the store's last statement failed because the database could not be reached (a
    /// claim abandoned then is the database's fault, not a takeover's). Always false on one host.
    var isUnreachable: Bool { get }

    // MARK: Runs

    func recordRunStarted(runID: String, host: String, pid: Int32) async throws(CheckpointError)
    func recordRunFinished(runID: String, summary: RunSummary, healthy: Bool?, apiLookups: Bool?)
        async throws(CheckpointError)
    /// When the last healthy run finished, of those that finished by `latest`: one stamped later
    /// ran under a clock that was ahead (``WallClock``), and its time says nothing of now.
    func lastHealthyRunFinishedAt(notAfter latest: Date) async throws(CheckpointError) -> Date?
    /// Bundles whose session is on the server but incomplete (``HalfSession``), oldest first.
    func halfSessions() async throws(CheckpointError) -> [HalfSession]

    // MARK: Bundles

    /// The rows of bundles not yet done or failed, by name (deferrals, first-seen times).
    func bundlesInFlight() async throws(CheckpointError) -> [String: BundleState]
    /// When each bundle in `done/` got there, by name.
    func doneTimes() async throws(CheckpointError) -> [String: Date]
    func bundleState(name: String) async throws(CheckpointError) -> BundleState?
    /// Marks `name` as being read; how many earlier readings never ended.
    func beginReading(name: String, now: Date) async throws(CheckpointError) -> Int
    /// Records the claim with the bundle's session and number of steps, binds the session to
    /// `producer` and `api` (``SessionBinding/decide(existing:producer:api:)``), and returns the
    /// session's steps already done against `api`, by step key, or the producer it belongs to.
    func recordClaim(
        name: String, sessionID: String, owner: ClaimOwner, producer: Producer, api: String, totalSteps: Int,
        now: Date
    ) async throws(CheckpointError) -> SessionClaim
    func recordDeferral(name: String, sessionID: String?, error: BundleFailure, policy: DeferralPolicy)
        async throws(CheckpointError) -> Deferral
    /// The bundle is in `done/` as `finalName`; its claim ends.
    func recordDone(name: String, sessionID: String?, finalName: String) async throws(CheckpointError)
    /// The bundle is in `failed/` as `finalName`; its claim ends.
    func recordFailure(name: String, sessionID: String?, error: BundleFailure, finalName: String)
        async throws(CheckpointError)
    /// The bundle is back in `incoming/` as `finalName` (a deferral recorded before); its claim ends.
    func recordGivenBack(name: String, finalName: String, counted: Bool) async throws(CheckpointError)

    // MARK: Steps

    func recordIntents(sessionID: String, _ intents: [CheckpointStore.StepIntent]) async throws(CheckpointError)
        -> [StepIntentOutcome]
    func recordFoundOnServer(sessionID: String, _ found: [(intent: CheckpointStore.StepIntent, serverID: Int64)])
        async throws(CheckpointError) -> [CompletedStep]
    /// Queues results for a commit of their own and returns at once; `then` hears how it went.
    /// Calls made in one order commit in that order.
    func recordResults(
        _ results: [CheckpointStore.StepResult],
        then: @escaping @Sendable (Result<[Result<CompletedStep, CheckpointError>], CheckpointError>) -> Void)

    // MARK: APIs

    /// The APIs the store knows, for the run's ``APIBinding``; `countingSessions`: with each one's
    /// sessions (a look at every session).
    func apiBook(countingSessions: Bool) async throws(CheckpointError) -> APIBook
    /// Records that `url` is the API `api`, giving it the sessions from before APIs were recorded
    /// when `adoptUnbound`.
    func recordAPIAddress(_ url: String, api: String, adoptUnbound: Bool) async throws(CheckpointError)

    // MARK: Reference lists

    func referenceLists() async throws(CheckpointError) -> [ReferenceList: CachedReferenceList]
    /// Keeps a list without making anyone wait for the write; `failed` hears a failure.
    func keepReferenceList(
        _ list: ReferenceList, etag: String?, body: [UInt8],
        failed: @escaping @Sendable (CheckpointError) -> Void)
}
