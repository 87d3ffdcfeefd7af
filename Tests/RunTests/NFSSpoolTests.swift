import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// A spool on NFS, as several hosts share one: an NFS v4 client takes `flock` as a byte-range lock
/// on the server, and an exclusive one only on a descriptor open for writing (``NFSLocks``).
@Suite struct NFSSpoolTests {
    @Test(
        "on NFS, where an exclusive lock needs a descriptor open for writing, every bundle is claimed, uploaded once and moved"
    )
    func bundlesAreClaimedWhereExclusiveLocksNeedWriting() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...3).map { SampleSession(seed: UInt64(9_840 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            let nfs = try await NFSLocks(in: directory, locksOf: spool.root)
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, environment: nfs.environment)
                #expect(status == 0, "\(output)")
                try await expectAllSyncedOnce(samples, spool: spool, server: server)
            }
        }
    }

    @Test(
        "a file system that cannot lock the bundles stops the run with 73, saying so: a claim is a lock, and none was a quiet 0"
    )
    func noLocksStopTheRun() async throws {
        try await withTemporaryDirectory { directory in
            let samples = [SampleSession(seed: 9_845), SampleSession(seed: 9_847)]
            let spool = try await makeSpool(in: directory, samples: samples)
            let noLocks = try await NFSLocks(in: directory, locksOf: spool.path(.incoming), refusingAllWith: ENOLCK)
            try await withDevServer { server in
                // One slot: the second bundle is tried only if the first failure did not stop claiming.
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, ["--concurrency", "1"],
                    environment: noLocks.environment)
                #expect(status == 73, "\(output)")
                #expect(output.contains("cannot lock the bundles, and a claim is a lock"), "\(output)")
                #expect(output.components(separatedBy: "cannot claim a bundle").count == 2, "one try: \(output)")
                #expect(try spool.names(.incoming).count == 2)
                #expect(try await server.requestLog().filter { $0.method == "POST" }.isEmpty)
            }
        }
    }

    @Test("a bundle that cannot be opened for a passing reason (no descriptor left) waits, and the run exits 75, not 0")
    func aPassingClaimFailureIsNoQuietSuccess() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 9_846)])
            let refused = try await OpenRefused(in: directory, opensOf: spool.path(.incoming) + "/", failWith: EMFILE)
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, environment: refused.environment)
                #expect(status == 75, "\(output)")
                #expect(output.contains("could not be claimed for a passing reason"), "\(output)")
                #expect(try spool.names(.incoming).count == 1)
                #expect(try await server.requestLog().filter { $0.method == "POST" }.isEmpty)
            }
        }
    }
}
