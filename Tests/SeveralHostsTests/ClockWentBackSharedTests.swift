import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

/// A deferral recorded in the shared database under a clock that has gone back since: the claim's
/// own check of the deferral, in SQL, agrees with the listing that called the bundle due.
@Suite struct ClockWentBackSharedTests {
    @Test(
        "with a shared database, a bundle deferred while the host's clock was a year ahead is claimed and uploaded once the clock is right"
    )
    func aDeferralFromAClockAheadIsClaimed() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 4_330)
            let spool = try await makeSpool(in: directory, samples: [sample])
            try FileManager.default.setAttributes(
                [.modificationDate: Date().addingTimeInterval(-3600)],
                ofItemAtPath: spool.path(.incoming, "\(sample.sessionID).tar.gz"))
            let aYearAhead = try await ClockAhead(in: directory, by: .seconds(365 * 86_400)).environment
            try await withDevServer { server in
                // An hour's pause asked for while the clock is wrong: deferred a year from now.
                try await server.putJSON("/admin/faults", ["rateLimitRate": 1, "retryAfterSeconds": 3600])
                let ahead = try await spawnSharedRun(
                    spool, against: server, database: database, host: "host-a", environment: aYearAhead)
                #expect(await ahead.finished() == 0, "\(ahead.errorText)")
                #expect(try await database.psql("SELECT last_outcome FROM dopesync.bundles") == "deferred")

                try await server.putJSON("/admin/faults", ["rateLimitRate": 0])
                let right = try await spawnSharedRun(spool, against: server, database: database, host: "host-b")
                #expect(await right.finished() == 0, "\(right.errorText)")
                try await expectAllSyncedOnce([sample], spool: spool, server: server)
            }
        }
    }
}
