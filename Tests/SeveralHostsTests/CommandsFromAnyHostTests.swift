import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

/// `status`, `requeue`, `prune` and `inspect` on a spool whose checkpoints are in the shared
/// database, from a host that did not run the bundles.
@Suite struct CommandsFromAnyHostTests {
    @Test("status from another host shows each claim's host and its lease's time left, and each host's last run")
    func statusFromAnyHost() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 4501)])
            try await withDevServer { server in
                let run = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await run.finished() == 0, "\(run.errorText)")
                // A claim held by a worker on host-c, as it would be mid-upload there.
                let name = "held.tar.gz"
                _ = FileManager.default.createFile(atPath: spool.path(.processing, name), contents: Data("x".utf8))
                try await database.psql(
                    """
                    INSERT INTO dopesync.claims (bundle_name, epoch, run_id, host, pid, claimed_at, renewed_at, lease_expires_at)
                    VALUES ('\(name)', 1, 'run-c', 'host-c', 77, extract(epoch FROM now()) - 5,
                            extract(epoch FROM now()), extract(epoch FROM now()) + 25)
                    """)
                let (_, environment) = database.runArguments(host: "host-b")
                let output = try await dopesync(
                    ["status", "--json", "--spool", spool.root, "--database", database.url], environment: environment)
                #expect(output.status == 0, "\(output.stderr)")
                let decoder = JSONDecoder()
                decoder.dateDecodingStrategy = .iso8601
                let status = try decoder.decode(SpoolStatus.self, from: Data(output.stdout.utf8))
                let claim = try #require(status.claims.first { $0.name == name })
                #expect(claim.host == "host-c" && claim.pid == 77 && claim.ownerAlive)
                #expect((claim.ageSeconds >= 4.5) && (claim.ageSeconds < 60))
                #expect((claim.leaseRemainingSeconds ?? 0) > 20)
                #expect(status.lastRunOfEachHost?.map(\.host) == ["host-a"])
                #expect(status.database == database.url)
                let text = try await dopesync(
                    ["status", "--spool", spool.root, "--database", database.url], environment: environment)
                #expect(text.stdout.contains("by host-c pid 77 run run-c"))
                #expect(text.stdout.contains("left"))
                #expect(!text.stdout.contains(database.cluster.password))
            }
        }
    }

    @Test(
        "requeue from another host resets a failed bundle's attempts in the shared database; prune forgets done bundles there"
    )
    func requeueAndPruneFromAnyHost() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let good = SampleSession(seed: 4701)
            let unknown = SampleSession(seed: 4702).naming(ammunitionId: 9999, inDopeEntry: 1)
            let spool = try await makeSpool(in: directory, samples: [good, unknown])
            try await withDevServer { server in
                let run = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await run.finished() == 1)
                let failed = try #require(try spool.names(.failed).first { !$0.hasSuffix(".error") })
                #expect(
                    try await database.psql(
                        "SELECT last_outcome, last_error_reason FROM dopesync.bundles WHERE name = '\(failed)'")
                        == "failed|unknown_reference")
                let (_, environment) = database.runArguments(host: "host-b")
                let requeue = try await dopesync(
                    ["requeue", failed, "--spool", spool.root, "--database", database.url], environment: environment)
                #expect(requeue.status == 0, "\(requeue.stderr)")
                #expect(try spool.names(.incoming) == [failed])
                #expect(
                    try await database.psql(
                        "SELECT last_outcome, attempts FROM dopesync.bundles WHERE name = '\(failed)'")
                        == "requeued|0")

                let prune = try await dopesync(
                    ["prune", "--older-than", "1ms", "--spool", spool.root, "--database", database.url],
                    environment: environment)
                #expect(prune.status == 0, "\(prune.stderr)")
                #expect(try spool.names(.done).isEmpty)
                #expect(
                    try await database.psql("SELECT count(*) FROM dopesync.bundles WHERE last_outcome = 'done'") == "0")
                let inspect = try await dopesync(
                    ["inspect", spool.path(.incoming, failed), "--database", database.url], environment: environment)
                #expect(inspect.stdout.contains("9999"), "inspect names the id the kept lists lack: \(inspect.stdout)")
            }
        }
    }
}
