import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// SIGINT and SIGTERM to the built `dopesync run` (through swift-service-lifecycle's graceful
/// shutdown): stop claiming, finish the steps in flight, give the rest back, exit normally.
@Suite struct SignalTests {
    @Test(
        "SIGTERM or SIGINT in the middle of uploads: the run ends within seconds, every bundle in done/ or back in incoming/, none failed or left in processing/",
        .timeLimit(minutes: 3), arguments: [SIGTERM, SIGINT])
    func signalStopsTheRunAndGivesBundlesBack(signal: Int32) async throws {
        try await withTemporarySpool { spool, scratch in
            let bundles = 8
            for seed in 1...bundles {
                try pack(SampleSession(seed: UInt64(9_300 + seed), shape: .realistic), into: spool, scratch: scratch)
            }
            var configuration = DevServerConfiguration()
            // About 50 requests a bundle at 50 ms: seconds of uploads left when the signal comes.
            configuration.faults.latencyMilliseconds = 50...50
            try await withDevServer(configuration) { server async throws in
                let (run, ticks) = try await spawnRunShowingProgress(spool, against: server, ["--concurrency", "2"])
                var signalled: ContinuousClock.Instant? = nil
                for await tick in ticks where signalled == nil && tick.requests >= 5 {
                    // Uploads are under way.
                    signalled = .now
                    run.kill(signal)
                }
                let status = await run.finished()
                let stopped = try #require(signalled, "the run showed uploads under way")
                #expect(status == 0, "a stop asked for is a normal end")
                #expect(
                    ContinuousClock.now - stopped < .seconds(10 * sanitizerSlowdown),
                    "the steps in flight finish, nothing more")
                let done = try await spool.list(.done).count
                let back = try await spool.list(.incoming).count
                #expect(done < bundles, "it stopped before the end")
                #expect(done + back == bundles)
                #expect(try await spool.list(.processing).isEmpty)
                #expect(try await spool.list(.failed).isEmpty)
                let store = try CheckpointStore(spool: spool)
                for entry in try await spool.list(.incoming) {
                    #expect(
                        try store.bundleState(name: entry.name)?.attempts ?? 0 == 0,
                        "given back uncounted: \(entry.name)")
                }
            }
        }
    }
}
