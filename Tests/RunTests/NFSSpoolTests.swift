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
                #expect(try spool.names(.done).count == 3, "\(output)")
                #expect(try spool.names(.incoming).isEmpty && spool.names(.processing).isEmpty)
                #expect(try await server.createdCounts()["session"] == 3)
            }
        }
    }
}
