import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@testable import DopeSync

/// Real `dopesync run` processes, killed with SIGKILL at random moments: nothing is lost and
/// nothing is created twice.
@Suite struct CrashRecoveryTests {
    @Test("SIGKILLed 20 times over 30 bundles, then a last run: every record exactly once, every bundle in done/")
    func killedRunsLoseNothingAndDuplicateNothing() async throws {
        try await withTemporaryDirectory { directory in
            // About 50 requests a bundle, and a server a few milliseconds slow, so that a child
            // is still at work when its random moment comes.
            let samples = (1...30).map { SampleSession(seed: UInt64(900 + $0), shape: .realistic) }
            let spool = try RunAgainstDevServerTests.spool(in: directory, samples: samples)
            var configuration = DevServerConfiguration()
            configuration.faults.latencyMilliseconds = 10...20
            try await withDevServer(configuration) { server in
                var environment = ProcessInfo.processInfo.environment
                environment["DOPESYNC_API_TOKEN"] = server.token
                let arguments = ["run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0", "--progress", "never"]
                var generator = SplitMix64(seed: 2026)
                var kills = 0
                var children = 0
                // Until 20 children died by SIGKILL mid-run (a child that finished first does not count).
                while kills < 20, children < 80 {
                    children += 1
                    let child = try Spawned(builtProduct("dopesync").path, arguments, environment: environment, silenceErrors: true)
                    // A random moment, the point of the test: from process start-up to mid-upload.
                    try await Task.sleep(for: .milliseconds(Int.random(in: 5...400, using: &generator)))
                    child.kill(SIGKILL)
                    if await child.finished() == 128 + SIGKILL { kills += 1 }
                }
                let last = try Spawned(builtProduct("dopesync").path, arguments, environment: environment, silenceErrors: true)
                #expect(await last.finished() == 0)

                #expect(kills >= 20, "\(kills) kills in \(children) children")
                #expect(try RunAgainstDevServerTests.names(spool, .done).count == samples.count)
                #expect(try RunAgainstDevServerTests.names(spool, .processing).isEmpty)
                #expect(try RunAgainstDevServerTests.names(spool, .incoming).isEmpty)
                let created = try await server.createdCounts()
                #expect(created["session"] == samples.count)
                #expect(created.values.reduce(0, +) == samples.reduce(0) { $0 + $1.expectedRequestCount })
            }
        }
    }
}
