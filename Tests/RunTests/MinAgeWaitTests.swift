import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Logging
import Synchronization
import Testing

@testable import DopeSync

/// A run that finds only bundles held by `min-age` waits for them within `max-time`: the run
/// that `dopesync.path` starts at a bundle's rename uploads it `min-age` later, instead of the
/// timer's next run, minutes later (issue 38). In-process against the dev server.
@Suite(.timeLimit(minutes: 3)) struct MinAgeWaitTests {
    func options(_ spool: Spool, _ server: RunningDevServer, minAge: Duration, maxTime: Duration?) -> RunOptions {
        var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
        options.minAge = minAge
        options.maxTime = maxTime
        options.minFreeSpace = .bytes(0)
        return options
    }

    @Test("a bundle younger than min-age, alone in incoming/: the same run waits and uploads it once due")
    func aRunWaitsForABundleHeldByMinAge() async throws {
        try await withTemporarySpool { spool, scratch in
            let name = try pack(SampleSession(seed: 9_500, shape: .realistic), into: spool, scratch: scratch)
            // min-age counts from the file's last write.
            let written = try #require(
                try FileManager.default.attributesOfItem(atPath: spool.path(.incoming, name))[.modificationDate]
                    as? Date)
            try await withDevServer { server async throws in
                let (summary, status) = await Worker(
                    options: options(spool, server, minAge: .seconds(2), maxTime: .seconds(30)), logger: quietLogger
                ).run()
                #expect(status == .success)
                #expect(try spool.names(.done) == [name], "uploaded by this run, not left to the next")
                #expect(summary.done == 1 && summary.heldByMinAge == 0)
                #expect(Date().timeIntervalSince(written) >= 2, "not before min-age")
                #expect(try await server.createdCounts()["session"] == 1)
            }
        }
    }

    @Test("a max-time shorter than the wait: no wait, the bundle is left for the next run")
    func noWaitPastMaxTime() async throws {
        try await withTemporarySpool { spool, scratch in
            let name = try pack(SampleSession(seed: 9_501, shape: .realistic), into: spool, scratch: scratch)
            try await withDevServer { server async throws in
                // What the run said, shown if it fails (once under a loaded suite: exit 75 from the
                // idle run's API check, the reason not seen).
                let said = Mutex<[String]>([])
                let logger = Logger(label: "test") { _ in
                    MessageHandler(withMetadata: true) { line in said.withLock { $0.append(line) } }
                }
                let started = ContinuousClock.now
                let (summary, status) = await Worker(
                    options: options(spool, server, minAge: .seconds(30), maxTime: .seconds(5)), logger: logger
                ).run()
                #expect(status == .success, "\(said.withLock { $0 })")
                #expect(ContinuousClock.now - started < .seconds(25), "it waited for the 30 s min-age")
                #expect(try spool.names(.incoming) == [name])
                #expect(summary.heldByMinAge == 1)
            }
        }
    }

    @Test("a stop while waiting for a held bundle: the wait ends at once, nothing claimed")
    func aStopEndsTheWait() async throws {
        try await withTemporarySpool { spool, scratch in
            let name = try pack(SampleSession(seed: 9_502, shape: .realistic), into: spool, scratch: scratch)
            try await withDevServer { server async throws in
                let options = options(spool, server, minAge: .seconds(30), maxTime: .seconds(50))
                let stop = options.stop
                // The stop comes as the run says it waits.
                let logger = Logger(label: "test") { _ in
                    MessageHandler { if $0.hasPrefix("nothing due yet: waiting") { stop.request() } }
                }
                let started = ContinuousClock.now
                let (summary, status) = await Worker(options: options, logger: logger).run()
                #expect(status == .success)
                #expect(ContinuousClock.now - started < .seconds(25), "it waited for the 30 s min-age")
                #expect(try spool.names(.incoming) == [name])
                #expect(summary.claimed == 0)
            }
        }
    }
}
