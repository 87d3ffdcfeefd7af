import Logging

/// One of a run's `--concurrency` upload slots: it claims the next bundle of the run's queue and
/// hands it to the ``BundleUploader``, one bundle after another, until the queue is empty, the run
/// stops, or a limit (`--max-time`, `--max-bundles`) ends claiming. A bundle claimed is always
/// finished: synced, failed, deferred, or given back when the run stops.
struct UploadSlot: Sendable {
    let queue: BundleQueue
    let spool: Spool
    let uploader: BundleUploader
    let counters: RunCounters
    /// No claim at or after this instant (`--max-time`).
    let deadline: ContinuousClock.Instant?
    /// No claim once the run has claimed this many (`--max-bundles`).
    let maxBundles: Int
    let logger: Logger

    func run() async {
        while !counters.shouldStop {
            if let deadline, ContinuousClock.now >= deadline { return }
            guard counters.snapshot.summary.claimed < maxBundles, let entry = queue.next() else { return }
            let claimed: ClaimedBundle?
            do {
                claimed = entry.folder == .processing ? try spool.claimOrphan(entry) : try spool.claim(entry)
            } catch {
                logger.error("cannot claim a bundle", metadata: ["bundle.name": "\(entry.name)", "error": "\(error)"])
                continue
            }
            guard let claimed else { continue }  // another run has it
            counters.claimed()
            counters.record(await uploader.process(claimed))
        }
    }
}
