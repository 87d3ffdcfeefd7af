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
    let uploader: BundleUploader
    let counters: RunCounters
    /// No claim at or after this instant (`--max-time`).
    let deadline: ContinuousClock.Instant?
    /// No claim once the run has claimed this many (`--max-bundles`).
    let maxBundles: Int
    /// No claim while the spool's file system has less free (`min-free-space`).
    var minFreeSpace: FreeSpaceFloor = .bytes(0)
    let logger: Logger

    func run() async {
        while !counters.shouldStop {
            if let deadline, ContinuousClock.now >= deadline { return }
            if minFreeSpace != .bytes(0), let space = FileSystemSpace(of: spool.root), space.isBelow(minFreeSpace) {
                if counters.report(\.belowFreeSpaceFloor) {
                    logger.critical(
                        "the spool's file system fell below its free-space floor: the run stops claiming and gives back (exit 73)",
                        metadata: ["free": "\(ByteCount(space.free))", "floor": "\(minFreeSpace)"])
                }
                return
            }
            // A claim is reserved before it is made, so slots in parallel never pass --max-bundles.
            guard counters.reserveClaim(limit: maxBundles) else { return }
            guard let entry = queue.next() else {
                counters.releaseClaim()
                return
            }
            let claimed: ClaimedBundle?
            do {
                claimed = entry.folder == .processing ? try spool.claimOrphan(entry) : try spool.claim(entry)
            } catch {
                counters.releaseClaim()
                logger.error("cannot claim a bundle", metadata: ["bundle.name": "\(entry.name)", "error": "\(error)"])
                continue
            }
            guard let claimed else {
                counters.releaseClaim()  // another run has it
                continue
            }
            counters.claimed()
            let outcome = await uploader.process(claimed)
            counters.record(outcome)
            if outcome == .done, let arrived = arrivals[entry.name] {
                counters.synced(after: max(0, Date().timeIntervalSince(arrived)))
            }
        }
    }
}
