import DopeSyncBundle
import DopeSyncSupport
import Foundation

/// What the operator's commands (`status`, `requeue`, `prune`, `inspect`) read and change in the
/// checkpoint store, whichever it is: the spool's SQLite file (``CheckpointStore``) or the
/// database several hosts share (`PostgresCheckpoints`), so they work from any host.
public protocol CheckpointLedger: Sendable {
    func bundlesInFlight() async throws(CheckpointError) -> [String: BundleState]
    func bundles(withOutcome outcome: BundleOutcome?) async throws(CheckpointError) -> [BundleState]
    /// Claims in progress, oldest first.
    func claims() async throws(CheckpointError) -> [ClaimRecord]
    /// Each host's last finished run, newest first (one host: one run).
    func lastFinishedRunOfEachHost() async throws(CheckpointError) -> [RunRecord]
    func recentRuns(limit: Int) async throws(CheckpointError) -> [RunRecord]
    func doneTimes() async throws(CheckpointError) -> [String: Date]
    func bundleState(name: String) async throws(CheckpointError) -> BundleState?
    func steps(sessionID: String) async throws(CheckpointError) -> [StepRecord]
    func cachedReferenceIDs() async throws(CheckpointError) -> ReferenceIDs
    /// These sessions' API and producer, by id (`status`: the API of a bundle's checkpoints).
    func sessionBindings(of sessionIDs: [String]) async throws(CheckpointError) -> [String: SessionBinding]
    func apiBook(countingSessions: Bool) async throws(CheckpointError) -> APIBook
    /// Bundles whose session is on the server but incomplete (``HalfSession``), oldest first.
    func halfSessions() async throws(CheckpointError) -> [HalfSession]

    /// `requeue`: a fresh attempt count; false when the store does not know the bundle.
    func resetAttempts(name: String, now: Date) async throws(CheckpointError) -> Bool
    /// `requeue` of a deferred bundle: due now, attempts kept; false when none is deferred.
    func makeDue(name: String, now: Date) async throws(CheckpointError) -> Bool
    /// `requeue` moved a bundle under another name: its row and steps follow.
    func renamed(from oldName: String, to newName: String, now: Date) async throws(CheckpointError)
    /// `prune`: forgets bundles deleted from `done/` (and steps no bundle needs); how many.
    func forget(names: [String]) async throws(CheckpointError) -> Int
    /// `prune`: bundles recorded done after `latest`, under a clock that has gone back since
    /// (``WallClock``), are recorded done `now` instead, so that `older-than` counts from now
    /// rather than from a time the clock may not reach for months; how many.
    func restampDoneTimes(after latest: Date, to now: Date) async throws(CheckpointError) -> Int
}

extension CheckpointStore: CheckpointLedger {
    public func lastFinishedRunOfEachHost() throws(CheckpointError) -> [RunRecord] {
        // One host owns a spool's file: its last run is the spool's.
        try lastFinishedRun().map { [$0] } ?? []
    }

    /// `requeue`'s move is into `incoming/`: the bundle takes its new name's row.
    public func renamed(from oldName: String, to newName: String, now: Date) throws(CheckpointError) {
        try renamed(from: oldName, to: newName, keepingALiveRow: false, now: now)
    }
}
