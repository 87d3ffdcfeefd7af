import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

/// A spool on a `hard` NFS mount whose server stalls holds a rename until it is back. The run's
/// spool calls are on threads of their own (`SpoolCalls`), so the stall holds its bundle alone:
/// the event loops, with the connections and the lease renewals, go on.
@Suite struct StalledSpoolTests {
    @Test(
        "a claim's rename held for longer than the lease: the other bundles sync meanwhile, the lease is kept, and the held one finishes once the rename goes through",
        .timeLimit(.minutes(3)))
    func aStalledRenameHoldsItsBundleAlone() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let samples = (1...6).map { SampleSession(seed: UInt64(4900 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            let held = "\(samples[0].sessionID).tar.gz"
            let stall = try await StalledRename(in: directory, holdingRenamesOf: held)
            var configuration = DevServerConfiguration()
            configuration.faults.latencyMilliseconds = 2...5
            try await withDevServer(configuration) { server in
                let run = try await spawnSharedRun(
                    spool, against: server, database: database, host: "host-a", lease: "2s", logging: true,
                    ["--concurrency", "3"], environment: stall.environment)
                #expect(await stall.held())
                var synced = 0
                for await line in run.lines() where line.contains("bundle synced") {
                    synced += 1
                    if synced == samples.count - 1 { break }
                }
                #expect(synced == samples.count - 1, "the other bundles did not sync while one rename was held")
                // Held for longer than its lease: wait, in the database, for that instant.
                try await database.psql(
                    "SELECT pg_sleep_until(to_timestamp((SELECT claimed_at FROM dopesync.claims WHERE bundle_name = '\(held)') + 3))"
                )
                // Its lease was renewed all along: still this run's, not run out.
                let lease = try await database.psql(
                    """
                    SELECT run_id IS NOT NULL AND lease_expires_at > extract(epoch FROM clock_timestamp()), epoch
                    FROM dopesync.claims WHERE bundle_name = '\(held)'
                    """)
                #expect(lease == "t|1", "\(lease)")
                stall.release()
                #expect(await run.finished() == 0, "\(run.errorText)")
                try await expectAllSyncedOnce(samples, spool: spool, server: server)
            }
        }
    }
}
