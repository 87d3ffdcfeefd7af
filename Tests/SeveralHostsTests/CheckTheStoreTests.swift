import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// `dopesync check` covers the store a run needs (issue 38): the built binary against a real
/// PostgreSQL server and the dev server. Each fault is named, with its fix, and check exits with
/// the code the run then exits with; check itself changes nothing in the database.
@Suite struct CheckTheStoreTests {
    /// `check` on `spool` against `server`, as host-a's job would run it, `extra` added.
    static func check(
        _ spool: Spool, _ server: RunningDevServer, database: SharedDatabase, _ extra: [String] = [],
        password: String? = nil
    ) async throws -> ProcessOutput {
        var environment = database.runArguments(host: "host-a").environment
        if let password { environment["DOPESYNC_DATABASE_PASSWORD"] = password }
        environment["DOPESYNC_API_TOKEN"] = server.token
        environment["DOPESYNC_MIN_FREE_SPACE"] = "0"
        return try await dopesync(
            ["check", "--spool", spool.root, "--api", server.baseURL, "--database", database.url] + extra,
            environment: environment)
    }

    @Test("check with a wrong database password: FAIL store naming the password, exit 78, as the run then exits")
    func wrongPassword() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 9_700)])
            try await withDevServer { server in
                let checked = try await Self.check(spool, server, database: database, password: "wrong")
                #expect(checked.status == 78, "\(checked.stdout)")
                #expect(
                    checked.stdout.contains("FAIL store") && checked.stdout.contains("password"), "\(checked.stdout)")
                let run = try await spawnSharedRun(
                    spool, against: server, database: database, host: "host-a",
                    environment: ["DOPESYNC_DATABASE_PASSWORD": "wrong"])
                #expect(await run.finished() == 78)
                // The operator's commands say the same (status used to say 73).
                for command in [["status"], ["requeue", "--all"], ["prune", "--older-than", "1d"]] {
                    let said = try await dopesync(
                        command + ["--spool", spool.root, "--database", database.url],
                        environment: ["DOPESYNC_DATABASE_PASSWORD": "wrong"])
                    #expect(said.status == 78, "\(command): \(said.stderr)")
                }
            }
        }
    }

    @Test("check with the database down: FAIL store asking whether PostgreSQL is up, exit 75, as the run")
    func databaseDown() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 9_701)])
            try await withDevServer { server in
                let down = "postgresql://dopesync@127.0.0.1:1/dopesync"
                let checked = try await dopesync(
                    ["check", "--spool", spool.root, "--api", server.baseURL, "--database", down],
                    environment: [
                        "DOPESYNC_API_TOKEN": server.token, "DOPESYNC_DATABASE_PASSWORD": "x",
                        "DOPESYNC_MIN_FREE_SPACE": "0",
                    ])
                #expect(checked.status == 75, "\(checked.stdout)")
                #expect(checked.stdout.contains("is PostgreSQL up"), "\(checked.stdout)")
                let run = try await spawnRun(
                    spool, against: server, ["--database", down], environment: ["DOPESYNC_DATABASE_PASSWORD": "x"])
                #expect(await run.finished() == 75)
            }
        }
    }

    @Test("check on a database an older dopesync made: ok, names what the next run applies, and applies nothing")
    func olderSchema() async throws {
        let database = try await SharedCluster.freshDatabase()
        // What the first release of the shared store made: its one migration, and no other.
        let first = try #require(PostgresSchema.migrations.first)
        try await database.psql(
            "SET ROLE \(PostgresCluster.role); CREATE SCHEMA dopesync; CREATE TABLE dopesync.schema_migrations (name text PRIMARY KEY, "
                + "applied_at double precision NOT NULL); " + first.sql.joined(separator: ";\n")
                + "; INSERT INTO dopesync.schema_migrations VALUES ('\(first.name)', 0)")
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 9_702)])
            try await withDevServer { server in
                let checked = try await Self.check(spool, server, database: database)
                #expect(checked.status == 0, "\(checked.stdout)")
                #expect(!checked.stdout.contains("database: not created yet"), "no SQLite line with a database set")
                let later = PostgresSchema.migrations.dropFirst().map(\.name).joined(separator: ", ")
                #expect(
                    checked.stdout.contains("schema at \(first.name): the next run applies \(later)"),
                    "\(checked.stdout)")
                let applied = try await database.psql("SELECT count(*) FROM dopesync.schema_migrations")
                #expect(applied.trimmingCharacters(in: .whitespacesAndNewlines) == "1", "check migrated: \(applied)")
                let run = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await run.finished() == 0, "the run migrates it")
            }
        }
    }

    @Test("check on a database a newer dopesync migrated: FAIL store naming the migration, exit 73, as the run")
    func newerSchema() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 9_705)])
            try await withDevServer { server in
                // The schema as this dopesync makes it, then a migration only a later one knows.
                let first = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await first.finished() == 0, "\(first.errorText)")
                try await database.psql("INSERT INTO dopesync.schema_migrations VALUES ('v99-from-the-future', 0)")
                let checked = try await Self.check(spool, server, database: database)
                #expect(checked.status == 73, "\(checked.stdout)")
                #expect(checked.stdout.contains("\"v99-from-the-future\""), "\(checked.stdout)")
                let run = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await run.finished() == 73)
            }
        }
    }

    @Test(
        "check without database: on a spool bound to a PostgreSQL database: FAIL store naming it, exit 78, as the run"
    )
    func boundToADatabaseCheckedWithout() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 9_706)])
            try await withDevServer { server in
                let shared = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await shared.finished() == 0, "\(shared.errorText)")
                let checked = try await dopesync(
                    ["check", "--spool", spool.root, "--api", server.baseURL],
                    environment: ["DOPESYNC_API_TOKEN": server.token, "DOPESYNC_MIN_FREE_SPACE": "0"])
                #expect(checked.status == 78, "\(checked.stdout)")
                #expect(checked.stdout.contains("FAIL store"), "\(checked.stdout)")
                #expect(checked.stdout.contains(database.url), "the database it is bound to: \(checked.stdout)")
                let run = try await spawnRun(spool, against: server)
                #expect(await run.finished() == 78)
            }
        }
    }

    @Test(
        "check with database: set over SQLite checkpoints never migrated: FAIL store naming `dopesync migrate`, exit 78, as the run"
    )
    func unmigratedSQLite() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(
                in: directory, samples: [SampleSession(seed: 9_703), SampleSession(seed: 9_704)])
            try await withDevServer { server in
                // One bundle done on SQLite, the other deferred there: its retry state would be lost.
                let sqliteRun = try await spawnRun(spool, against: server, ["--max-bundles", "1"])
                #expect(await sqliteRun.finished() == 0)
                for binding in [true, false] {
                    // Bound to the SQLite file, or (a spool from before bindings) bound to none.
                    if !binding { try FileManager.default.removeItem(atPath: SpoolBinding.path(spool)) }
                    let checked = try await Self.check(spool, server, database: database)
                    #expect(checked.status == 78, "\(checked.stdout)")
                    #expect(checked.stdout.contains("dopesync migrate --to"), "\(checked.stdout)")
                    let run = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                    #expect(await run.finished() == 78)
                }
            }
        }
    }

    @Test(
        "a spool with SQLite checkpoints joining a database that already holds another spool's: refused until migrated, then nothing is sent twice"
    )
    func unmigratedSQLiteBesideAnotherSpool() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let other = try await makeSpool(
                in: directory.appendingPathComponent("other"), samples: [SampleSession(seed: 9_705)])
            let spool = try await makeSpool(
                in: directory, samples: [SampleSession(seed: 9_706), SampleSession(seed: 9_707)])
            var configuration = DevServerConfiguration()
            configuration.ignoreIdempotencyKeys = true
            try await withDevServer(configuration) { server in
                // Another host's spool has filled the database with its steps already.
                let otherRun = try await spawnSharedRun(other, against: server, database: database, host: "host-b")
                #expect(await otherRun.finished() == 0)
                // This spool uploaded one bundle on SQLite, before bindings existed (no binding file).
                let sqliteRun = try await spawnRun(spool, against: server, ["--max-bundles", "1"])
                #expect(await sqliteRun.finished() == 0)
                try FileManager.default.removeItem(atPath: SpoolBinding.path(spool))
                let checked = try await Self.check(spool, server, database: database)
                #expect(checked.status == 78, "\(checked.stdout)")
                #expect(checked.stdout.contains("dopesync migrate --to"), "\(checked.stdout)")
                let refused = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await refused.finished() == 78)

                let (_, environment) = database.runArguments(host: "host-a")
                let migrated = try await dopesync(
                    ["migrate", "--to", database.url, "--spool", spool.root], environment: environment)
                #expect(migrated.status == 0, "\(migrated.stderr)")
                // Its done bundle's session is requeued as a producer would send it again.
                let done = try spool.names(.done)
                #expect(done.count == 1)
                #expect(rename(spool.path(.done, done[0]), spool.path(.incoming, done[0])) == 0)
                let run = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await run.finished() == 0)
                #expect(try await server.createdCounts()["session"] == 3, "each of the three sessions once")
            }
        }
    }

    @Test(
        "check with a metrics-file on a read-only mount: FAIL metrics naming the folder and ReadWritePaths, not an ACL, exit 73",
        .enabled(if: geteuid() == 0, "mounts a read-only tmpfs"))
    func unwritableMetricsFolder() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [])
            let folder = directory.appendingPathComponent("node-exporter")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            // Read-only for root too: root passes every permission check, not a read-only mount.
            try await withMount(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"], on: folder) {
                try await withDevServer { server in
                    let checked = try await dopesync(
                        ["check", "--spool", spool.root, "--api", server.baseURL],
                        environment: [
                            "DOPESYNC_API_TOKEN": server.token, "DOPESYNC_MIN_FREE_SPACE": "0",
                            "DOPESYNC_METRICS_FILE": folder.appendingPathComponent("dopesync.prom").path,
                        ])
                    #expect(checked.status == 73, "\(checked.stdout)")
                    #expect(checked.stdout.contains("FAIL metrics"), "\(checked.stdout)")
                    #expect(
                        checked.stdout.contains("\(folder.path) is on a file system that is read-only for root"),
                        "\(checked.stdout)")
                    #expect(checked.stdout.contains("ReadWritePaths=\(folder.path)"), "\(checked.stdout)")
                    // An ACL cannot make a read-only mount writable.
                    #expect(!checked.stdout.contains("setfacl"), "\(checked.stdout)")
                }
            }
        }
    }

    @Test(
        "a cancelled wait for PostgreSQL is neither an outage (75) nor a failed database (73); a timed-out one is an outage"
    )
    func cancellationIsNotAnOutage() {
        let settings = DatabaseSettings(
            host: "127.0.0.1", port: 5432, user: "dopesync", database: "dopesync", tls: .disable, password: "x",
            lease: .seconds(30))
        let cancelled = PostgresCheckpoints.checkpointError(CancellationError(), settings: settings, doing: "claiming")
        #expect(cancelled.code == .cancelled && !cancelled.isUnreachable && !cancelled.isDatabaseFailure)
        let timedOut = PostgresCheckpoints.checkpointError(TimedOut(), settings: settings, doing: "claiming")
        #expect(timedOut.isUnreachable)
    }
}
