import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Synchronization
import Testing

@testable import DopeSync

/// The built `dopesync run` (its tasks on NIO's event loops) while another process holds the
/// checkpoint database's write lock: only the checkpoint writer's thread waits for it.
@Suite struct WriteLockHeldElsewhereTests {
    @Test(
        "another process holds the write lock for 5 s mid-run: the progress line keeps ticking and answers in flight are read; released, the run finishes normally",
        .timeLimit(minutes: 3))
    func eventLoopsKeepRunningWhileAnotherProcessWrites() async throws {
        try await withTemporarySpool { spool, scratch in
            let bundles = 4
            for seed in 1...bundles {
                try pack(SampleSession(seed: UInt64(9_100 + seed), shape: .realistic), into: spool, scratch: scratch)
            }
            _ = try CheckpointStore(spool: spool)  // migrated, so the run opens it without the lock
            var configuration = DevServerConfiguration()
            // A request of each bundle in flight at almost any moment.
            configuration.faults.latencyMilliseconds = 100...100
            try await withDevServer(configuration) { server async throws in
                let (run, ticks) = try await spawnRunShowingProgress(spool, against: server, ["--concurrency", "4"])

                var holder: Spawned? = nil
                var lockedAt: ContinuousClock.Instant? = nil
                var requestsWhenLocked = 0
                var releasedAt: ContinuousClock.Instant? = nil
                var held: [ProgressTick] = []
                for await tick in ticks {
                    // Past the three reference lists read before the first bundle's first step.
                    if lockedAt == nil, tick.requests > ReferenceList.allCases.count {
                        // Uploads are under way: another process takes the lock, held until its input closes.
                        let locker = try await Spawned.holdingLock(on: spool.databaseLockPath)
                        (holder, lockedAt, requestsWhenLocked) = (locker, .now, tick.requests)
                    } else if let locked = lockedAt, releasedAt == nil {
                        held.append(tick)
                        if tick.at - locked >= .seconds(5), let holder {
                            try holder.input.close()  // the lock goes once `cat` ends
                            #expect(await holder.finished() == 0)
                            releasedAt = .now
                        }
                    }
                }
                let status = await run.finished()

                let locked = try #require(lockedAt, "the run showed requests under way")
                let released = try #require(releasedAt, "the run was still going after 5 s of the lock held elsewhere")
                #expect(released - locked >= .seconds(5))
                // The progress line is redrawn every 500 ms by a task on an event loop: it went on
                // all through (before the writer thread, the loops waited with the lock and no
                // line came for the whole 5 s).
                let instants = [locked] + held.map(\.at)
                let longestGap = zip(instants, instants.dropFirst()).map { $1 - $0 }.max() ?? .zero
                #expect(held.count >= 8, "about ten redraws in 5 s; saw \(held.count)")
                #expect(longestGap < .milliseconds(1_500), "the progress line stopped for \(longestGap)")
                // Answers to the requests in flight were read while nothing could be checkpointed
                // (the progress line counts a request once its answer is read).
                let last = try #require(held.last)
                #expect(
                    last.requests > requestsWhenLocked,
                    "requests answered while the lock was held: \(requestsWhenLocked) → \(last.requests)")

                #expect(status == 0, "the run waited for the lock (10 s busy timeout), then finished normally")
                #expect(try await spool.list(.done).count == bundles)
                for folder in [Spool.Folder.incoming, .processing, .failed] {
                    #expect(try await spool.list(folder).isEmpty, "\(folder)")
                }
                #expect(try await server.createdCounts()["session"] == bundles, "each session created once")
            }
        }
    }
}
