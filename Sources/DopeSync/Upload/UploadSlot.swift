import Foundation
import Logging

/// One of a run's `--concurrency` upload slots: it claims the next bundle of the run's queue and
/// hands it to the ``BundleUploader``, one bundle after another, until the queue is empty, the run
/// stops, or a limit (`--max-time`, `--max-bundles`) ends claiming. A bundle claimed is always
/// finished: synced, failed, deferred, or given back when the run stops.
struct UploadSlot: Sendable {
    /// When the worker first saw each bundle of the queue, by name.
    var arrivals: [String: Date] = [:]
    let queue: BundleQueue
    let spool: Spool
    /// Where a claim is taken first: a lease in a shared database; nothing more on one host.
    let claims: any ClaimStorage
    let uploader: BundleUploader
    let counters: RunCounters
    /// No claim once this clock reads this instant (`--max-time`).
    let deadline: (clock: @Sendable () -> ContinuousClock.Instant, at: ContinuousClock.Instant)?
    /// No claim once the run has claimed this many (`--max-bundles`).
    let maxBundles: Int
    /// No claim while the spool's file system has less free (`min-free-space`).
    var minFreeSpace: FreeSpaceFloor = .bytes(0)
    let logger: Logger

    func run() async {
        while !counters.shouldStop {
            if let deadline, deadline.clock() >= deadline.at { return }
            // A claim is reserved before it is made, so slots in parallel never pass --max-bundles.
            guard counters.reserveClaim(limit: maxBundles) else { return }
            guard let entry = queue.next() else {
                counters.releaseClaim()
                return
            }
            // One trip to the spool's threads: the free space, and whether the bundle is still
            // there (another host took it, or it is done: no claim to ask the store for).
            let (floor, path) = (minFreeSpace, spool.path(entry.folder, entry.name))
            let (space, present) = await SpoolCalls.run { [root = spool.root] in
                (floor == .bytes(0) ? nil : FileSystemSpace(of: root), FileManager.default.fileExists(atPath: path))
            }
            if let space, space.isBelow(floor) {
                counters.releaseClaim()
                if counters.report(\.belowFreeSpaceFloor) {
                    logger.critical(
                        "the spool's file system fell below its free-space floor: the run stops claiming and gives back (exit 73)",
                        metadata: ["free": "\(ByteCount(space.free))", "floor": "\(floor)"])
                }
                return
            }
            guard present, let claimed = await claim(entry) else {
                counters.releaseClaim()  // another run has it, or it cannot be claimed
                continue
            }
            counters.claimed()
            let outcome = await uploader.process(claimed)
            // A bundle left where it is (a move that failed, one replaced, a claim lost) stops
            // being renewed: another worker may take it once its lease runs out. A claim that
            // ended with its outcome is already let go, and this does nothing.
            await claims.releaseClaim(of: entry.name)
            counters.record(outcome)
            if outcome == .done, let arrived = arrivals[entry.name] {
                counters.synced(after: max(0, Date().timeIntervalSince(arrived)))
            }
        }
    }

    /// The store's claim first (a lease, when the store is shared), then the spool's: the rename
    /// into `processing/` (or, for an orphan, its file opened). Nil when either is someone
    /// else's; the store's claim is let go when the spool's cannot be had.
    private func claim(_ entry: SpoolEntry) async -> ClaimedBundle? {
        let orphan = entry.folder == .processing
        do {
            guard
                try await claims.acquireClaim(
                    of: entry.name, orphan: orphan, modified: entry.modified,
                    owner: ClaimOwner.current(runID: counters.runID))
            else { return nil }
        } catch {
            uploader.disposition.checkpointFailed(error, logger: logger)
            return nil
        }
        do {
            let (spool, lockRequired, leased) = (
                spool, !claims.tookOverExpiredLease(of: entry.name), claims.claimsRunOut
            )
            let claimed = try await SpoolCalls.run { () throws(SpoolError) in
                orphan
                    ? try spool.claimOrphan(entry, lockRequired: lockRequired, leased: leased)
                    : try spool.claim(entry, leased: leased)
            }
            if claimed == nil { await claims.releaseClaim(of: entry.name) }
            return claimed
        } catch {
            logger.error("cannot claim a bundle", metadata: ["bundle.name": "\(entry.name)", "error": "\(error)"])
            reportUnclaimable(error)
            await claims.releaseClaim(of: entry.name)
            return nil
        }
    }

    /// A bundle that cannot be taken out of its folder waits there, and the run's exit says so,
    /// never a quiet 0:
    /// - this file's own refusal (its mode, its owner, a sticky bit): 73, the other bundles go on;
    /// - a folder that refuses every move (read-only, full, failing) or a file system that cannot
    ///   lock at all: 73, and the run stops claiming;
    /// - anything else (no descriptor left): 75, the next run tries again.
    private func reportUnclaimable(_ error: SpoolError) {
        let errno = error.errno ?? 0
        // EPERM is this file's (its owner, a sticky bit, fs.protected_hardlinks); EACCES, a
        // folder this user may not write.
        let ownFile =
            error.code == .unreadableOrphan || error.code == .notLockable
            || errno == EPERM
        if ownFile {
            if counters.report(\.moveFailed) {
                logger.critical(
                    error.code == .unreadableOrphan
                        ? "a bundle left in processing/ cannot be opened and waits there: the run goes on with the others and exits 73"
                        : "a bundle cannot be claimed and waits where it is: the run goes on with the others and exits 73",
                    metadata: ["error": "\(error)"])
            }
        } else if SpoolError.folderWideErrors.contains(errno) {
            if counters.report(\.spoolNotWritable) {
                logger.critical(
                    "the spool refuses to claim bundles: the run stops claiming and exits 73",
                    metadata: ["error": "\(error)"])
            }
        } else if SpoolError.noLockErrors.contains(errno) {
            if counters.report(\.spoolNotWritable) {
                logger.critical(
                    error.code == .lockFailed
                        ? "the spool's file system cannot lock the bundles, and a claim is a lock (an NFS mount whose lock service is not running, say): the run stops claiming and exits 73"
                        : "the spool's file system cannot move bundles as a claim needs: the run stops claiming and exits 73",
                    metadata: ["error": "\(error)"])
            }
        } else if counters.report(\.claimFailed) {
            logger.error(
                "a bundle could not be claimed for a passing reason and waits where it is; the run exits 75",
                metadata: ["error": "\(error)"])
        }
    }
}
