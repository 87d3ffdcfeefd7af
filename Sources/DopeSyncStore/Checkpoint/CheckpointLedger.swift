import Foundation

/// What the operator's commands (`status`, `requeue`, `prune`, `inspect`) read and change in the
/// checkpoint store, whichever it is: the spool's SQLite file (``CheckpointStore``) or the
/// database several hosts share (``PostgresCheckpoints``), so they work from any host.
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
}

extension CheckpointStore: CheckpointLedger {
    public func lastFinishedRunOfEachHost() throws(CheckpointError) -> [RunRecord] {
        // One host owns a spool's file: its last run is the spool's.
        try lastFinishedRun().map { [$0] } ?? []
    }
}

/// Runs a command's `body` with the shared database's ledger; a database that cannot be used is
/// the command's outcome (exit 75 when unreachable, 78 when it refuses us, else 73).
/// With `spool`, a database that is not the one the spool is bound to is refused first (exit 78).
func withSharedLedger(
    _ database: DatabaseSettings, spool: Spool? = nil, _ body: (PostgresCheckpoints) async -> CommandOutcome
) async -> CommandOutcome {
    do {
        return try await PostgresCheckpoints.with(database, logger: SpoolStatus.commandLogger) { ledger in
            if let spool, let refused = storeRefusal(spool, store: try await ledger.storeIdentity()) { return refused }
            return await body(ledger)
        }
    } catch {
        let code = (error as? CheckpointError)?.code
        let status: ExitStatus =
            code == .unreachable ? .temporaryFailure : code == .refused ? .configuration : .cannotCreate
        return CommandOutcome(
            output: "", diagnostics: "cannot use the checkpoint database \(database.url): \(error)", status: status)
    }
}

/// A command's refusal of `store` when the spool is bound to another (``SpoolBinding``); nil
/// when it may go on. A command binds nothing: only a run or `migrate` does.
func storeRefusal(_ spool: Spool, store: StoreIdentity) -> CommandOutcome? {
    do {
        _ = try SpoolBinding.check(spool, store: store, bindIfUnbound: false)
        return nil
    } catch {
        return CommandOutcome(output: "", diagnostics: "\(error)", status: error.exitStatus)
    }
}

/// A command's refusal of the spool's SQLite file: the spool is bound to a database, or the file
/// was moved to one by `migrate`.
func sqliteRefusal(_ spool: Spool) -> CommandOutcome? {
    let bound: Bool
    do {
        bound = try SpoolBinding.check(spool, store: .sqlite(spool), bindIfUnbound: false)
    } catch {
        return CommandOutcome(output: "", diagnostics: "\(error)", status: error.exitStatus)
    }
    // A spool bound to its SQLite file has never been migrated away: only an unbound one's file
    // is opened (a private copy) to see whether `migrate` retired it.
    guard !bound, FileManager.default.fileExists(atPath: spool.databasePath),
        let file = try? CheckpointStore(readingSnapshotOf: spool.databasePath),
        let movedTo = try? file.movedTo()
    else { return nil }
    let error = SpoolBinding.mismatch(
        spool, bound: StoreIdentity(kind: .postgresql, id: nil, name: movedTo), given: .sqlite(spool))
    return CommandOutcome(output: "", diagnostics: "\(error)", status: error.exitStatus)
}
