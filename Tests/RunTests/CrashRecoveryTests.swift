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
            let samples = (1...30).map { SampleSession(seed: UInt64(900 + $0)) }
            let spool = try RunAgainstDevServerTests.spool(in: directory, samples: samples)
            try await withDevServer { server in
                var environment = ProcessInfo.processInfo.environment
                environment["DOPESYNC_API_TOKEN"] = server.token
                let arguments = ["run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0", "--progress", "never"]
                var generator = SplitMix64(seed: 2026)
                var kills = 0
                for _ in 0..<20 {
                    let child = try Spawned(builtProduct("dopesync").path, arguments, environment: environment, silenceErrors: true)
                    // A random moment, the point of the test: from process start-up to mid-upload.
                    try await Task.sleep(for: .milliseconds(Int.random(in: 5...400, using: &generator)))
                    child.kill(SIGKILL)
                    if child.wait() == 128 + SIGKILL { kills += 1 }
                }
                let last = try Spawned(builtProduct("dopesync").path, arguments, environment: environment, silenceErrors: true)
                #expect(last.wait() == 0)

                #expect(kills >= 15, "most children were killed mid-run (\(kills))")
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
