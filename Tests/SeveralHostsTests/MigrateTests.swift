import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `dopesync migrate --to URL`: a spool switched from its SQLite file to the shared database
/// resends nothing its checkpoints hold.
@Suite struct MigrateTests {
    @Test(
        "a run on SQLite killed mid-upload, migrate, then a run on PostgreSQL: only the steps not done are sent, each once",
        arguments: keysHonouredOrIgnored)
    func switchingOverResendsNothing(keysHonoured: Bool) async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let samples = (1...4).map { SampleSession(seed: UInt64(4600 + $0), shape: .realistic) }
            let spool = try await makeSpool(in: directory, samples: samples)
            let killer = SignalAtRequest(SIGKILL)
            var configuration = DevServerConfiguration()
            configuration.faults.latencyMilliseconds = 2...5
            configuration.ignoreIdempotencyKeys = !keysHonoured
            configuration.onRequest = { _, _ in killer.requestArrived() }
            try await withDevServer(configuration) { server in
                let onOneHost = try await spawnRun(spool, against: server, ["--concurrency", "2"])
                killer.aim(at: onOneHost, after: 100)
                #expect(await onOneHost.finished() == 128 + SIGKILL)
                let doneInTheFile = try CheckpointStore(spool: spool).allSteps().filter { $0.state == .done }.count
                #expect(doneInTheFile > 0)

                let (_, environment) = database.runArguments(host: "host-a")
                let migrate = try await dopesync(
                    ["migrate", "--to", database.url, "--spool", spool.root], environment: environment)
                #expect(migrate.status == 0, "\(migrate.stderr)")
                #expect(migrate.stdout.hasPrefix("migrated "))
                #expect(
                    try await database.psql("SELECT count(*) FROM dopesync.steps WHERE state = 'done'")
                        == "\(doneInTheFile)")
                // Twice copies nothing twice: the spool is bound to the database now, its file retired.
                let again = try await dopesync(
                    ["migrate", "--to", database.url, "--spool", spool.root], environment: environment)
                #expect(again.status == 0 && again.stdout.contains("nothing to migrate"), "\(again.stdout)")
                // The file can no longer be used by mistake: a run without database: refuses it.
                let sqliteRun = try await dopesync(
                    ["run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0"],
                    environment: environment.merging(["DOPESYNC_API_TOKEN": server.token]) { $1 })
                #expect(sqliteRun.status == 78, "\(sqliteRun.stderr)")
                #expect(sqliteRun.stderr.contains("dopesync.store says"), "\(sqliteRun.stderr)")

                let postsBefore = try await server.requestLog().filter { $0.method == "POST" }.count
                let shared = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await shared.finished() == 0, "\(shared.errorText)")
                try await expectAllSyncedOnce(samples, spool: spool, server: server)
                let total = samples.reduce(0) { $0 + $1.expectedRequestCount }
                let postsAfter = try await server.requestLog().filter { $0.method == "POST" }.count
                // Each step the file had done is not sent again; at most the steps in flight when
                // the run was killed (two a bundle: one on the wire, one committing) are sent again.
                #expect(postsAfter - postsBefore <= total - doneInTheFile + 2 * samples.count)
            }
        }
    }

    @Test(
        "migrate and runs on the SQLite file exclude each other: a run waiting out min-age keeps migrate out (73), and a run that starts during a migration claims nothing (75)"
    )
    func migrateAndRunsExcludeEachOther() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 4620)
            let spool = try await makeSpool(in: directory, samples: [sample])
            let (_, environment) = database.runArguments(host: "host-a")
            try await withDevServer { server in
                // A run holding its store with no claim: the bundle is too fresh for an hour's min-age,
                // and the run waits for it, however slow the machine.
                let run = try await spawnRunLogging(spool, against: server, ["--min-age", "1h"])
                #expect(await run.firstLine(containing: "nothing due yet") != nil)
                let refused = try await dopesync(
                    ["migrate", "--to", database.url, "--spool", spool.root], environment: environment)
                #expect(refused.status == 73, "\(refused.stderr)")
                #expect(refused.stderr.contains("a run (or a `requeue` or `prune`) is using"), "\(refused.stderr)")
                run.kill(SIGTERM)
                #expect(await run.finished() == 0)

                // A migration under way (its lock, held here): a run now claims nothing.
                let migration = try #require(try await StoreLock.take(.exclusive, in: spool))
                let during = try await spawnRun(spool, against: server)
                #expect(await during.finished() == 75)
                #expect(try spool.names(.incoming) == ["\(sample.sessionID).tar.gz"], "nothing claimed")
                await SpoolCalls.run { migration.release() }  // the migration's end
                let migrated = try await dopesync(
                    ["migrate", "--to", database.url, "--spool", spool.root], environment: environment)
                #expect(migrated.status == 0, "\(migrated.stderr)")
                // inspect with the spool alone does not show the retired file's checkpoints as current.
                let inspected = try await dopesync(
                    ["inspect", spool.path(.incoming, "\(sample.sessionID).tar.gz"), "--spool", spool.root],
                    environment: environment)
                #expect(inspected.status == 0, "\(inspected.stderr)")
                #expect(inspected.stderr.contains("was migrated to \(database.url)"), "\(inspected.stderr)")
            }
        }
    }

    @Test(
        "a bundle first seen while the clock was not synchronized keeps that sight's boot-clock stamp through migrate, which max-age counts from"
    )
    func migrateKeepsTheBootClockOfAFirstSight() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporarySpool { spool, _ in
            let sight = BootInstant(bootID: "host-a:1f2e3d4c", secondsSinceBoot: 86_400.25)
            let unsynchronized = ClockFacts(isSynchronized: { false }, bootInstant: { sight })
            let store = try CheckpointStore(
                path: spool.databasePath, lockPath: spool.databaseLockPath, clock: unsynchronized)
            let failure = BundleFailure(reason: .unreachable, message: "no answer")
            _ = try store.recordDeferral(name: "waits.tar.gz", sessionID: nil, error: failure)
            #expect(try store.bundleState(name: "waits.tar.gz")?.firstSeenOnBoot == sight)
            store.close()

            let (_, environment) = database.runArguments(host: "host-a")
            let migrate = try await dopesync(
                ["migrate", "--to", database.url, "--spool", spool.root], environment: environment)
            #expect(migrate.status == 0, "\(migrate.stderr)")
            #expect(
                try await database.psql("SELECT first_seen_boot FROM dopesync.bundles WHERE name = 'waits.tar.gz'")
                    == sight.stored)
        }
    }
}
