import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The shared database failing under `dopesync run`: down at the start, restarted as a crash
/// would, its connections cut. Each test has a server of its own, since it stops it.
@Suite struct DatabaseFaultTests {
    @Test(
        "PostgreSQL unreachable at the start: exit 75, nothing claimed, nothing sent; the metrics file says 75 and the backlog"
    )
    func unreachableAtTheStart() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...3).map { SampleSession(seed: UInt64(4300 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            let metrics = directory.appendingPathComponent("dopesync.prom").path
            try await withDevServer { server in
                let run = try await spawnRun(
                    spool, against: server,
                    ["--database", "postgresql://dopesync@127.0.0.1:1/dopesync", "--metrics-file", metrics],
                    environment: ["DOPESYNC_DATABASE_PASSWORD": "unused"])
                #expect(await run.finished() == 75)
                let written = try String(contentsOfFile: metrics, encoding: .utf8)
                #expect(written.contains("dopesync_last_run_exit_code 75"), "\(written)")
                #expect(written.contains(#"dopesync_spool_bundles{folder="incoming"} 3"#), "\(written)")
                #expect(try spool.names(.incoming).count == samples.count)
                #expect(try spool.names(.processing).isEmpty)
                #expect(try await server.requestLog().filter { !$0.path.hasPrefix("/admin") }.isEmpty)
            }
        }
    }

    @Test("a wrong PostgreSQL password: exit 78, nothing claimed; the metrics file says 78 and the backlog")
    func wrongPasswordIsInTheMetrics() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(
                in: directory, samples: [SampleSession(seed: 4310), SampleSession(seed: 4311)])
            let metrics = directory.appendingPathComponent("dopesync.prom").path
            try await withDevServer { server in
                let run = try await spawnSharedRun(
                    spool, against: server, database: database, host: "host-a", ["--metrics-file", metrics],
                    environment: ["DOPESYNC_DATABASE_PASSWORD": "wrong"])
                #expect(await run.finished() == 78)
                let written = try String(contentsOfFile: metrics, encoding: .utf8)
                #expect(written.contains("dopesync_last_run_exit_code 78"), "\(written)")
                #expect(written.contains(#"dopesync_spool_bundles{folder="incoming"} 2"#), "\(written)")
                #expect(try spool.names(.processing).isEmpty)
            }
        }
    }

    @Test(
        "a shared run's metrics file gives its own finish as the last success, not another host's healthy run stamped a year ahead; runs stamped ahead are no host's last run"
    )
    func aSharedRunsLastSuccessIsInTheMetrics() async throws {
        let database = try await SharedCluster.freshDatabase()
        // Another host's healthy run, under a clock a year ahead (its schema made by a first run).
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 4312)])
            let metrics = directory.appendingPathComponent("dopesync.prom").path
            try await withDevServer { server in
                let idle = try await spawnSharedRun(
                    spool, against: server, database: database, host: "host-b", ["--max-bundles", "0"])
                #expect(await idle.finished() == 0, "\(idle.errorText)")
                try await database.psql(
                    """
                    INSERT INTO dopesync.runs (run_id, host, pid, started_at, finished_at, exit_code, healthy,
                        claimed, done, deferred, failed, requests, bytes, seconds)
                    VALUES ('ahead', 'host-c', 1, extract(epoch FROM now()) + 365 * 86400,
                        extract(epoch FROM now()) + 365 * 86400 + 1, 0, true, 0, 0, 0, 0, 0, 0, 1),
                    ('ahead-a', 'host-a', 1, extract(epoch FROM now()) + 365 * 86400,
                        extract(epoch FROM now()) + 365 * 86400 + 1, 0, true, 0, 0, 0, 0, 0, 0, 1)
                    """)
                let run = try await spawnSharedRun(
                    spool, against: server, database: database, host: "host-a", ["--metrics-file", metrics])
                #expect(await run.finished() == 0)
                let prefix = "dopesync_last_success_timestamp_seconds "
                let written = try String(contentsOfFile: metrics, encoding: .utf8)
                let line = written.split(separator: "\n").first { $0.hasPrefix(prefix) }
                let lastSuccess = try #require(line.flatMap { Double($0.dropFirst(prefix.count)) }, "\(written)")
                #expect(abs(lastSuccess - Date().timeIntervalSince1970) < 60, "\(written)")
                // Each host's last run, as status shows it: host-a's is the one just made, not the
                // one a year ahead; host-c's, all ahead, comes last.
                let (lastRuns, recent) = try await PostgresCheckpoints.with(database.settings(), logger: quietLogger) {
                    store in (try await store.lastFinishedRunOfEachHost(), try await store.recentRuns(limit: 10))
                }
                #expect(lastRuns.map(\.host) == ["host-a", "host-b", "host-c"], "\(lastRuns)")
                #expect(lastRuns.first?.runID != "ahead-a", "\(lastRuns)")
                // status --runs: the two real runs, newest first, then the two stamped ahead.
                #expect(recent.map(\.host).prefix(2) == ["host-a", "host-b"], "\(recent)")
                #expect(Set(recent.suffix(2).map(\.runID)) == ["ahead", "ahead-a"], "\(recent)")
            }
        }
    }

    enum Fault: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// `pg_ctl restart -m immediate`: the server crashes and recovers from its WAL.
        case restartImmediately = "pg_ctl restart -m immediate"
        /// Every session of the worker's role ended by the server (`pg_terminate_backend`).
        case terminateConnections = "pg_terminate_backend"
        var testDescription: String { rawValue }
    }

    @Test(
        "the database lost mid-run (restarted as a crash would, or its connections cut): the run stops claiming and settles; the next run finishes; every record once",
        arguments: Fault.allCases, keysHonouredOrIgnored)
    func lostMidRunLosesNothing(fault: Fault, keysHonoured: Bool) async throws {
        let cluster = try await PostgresCluster.start()
        let database = try await SharedDatabase.fresh(in: cluster)
        try await withTemporaryDirectory { directory in
            let samples = (1...8).map { SampleSession(seed: UInt64(4400 + $0), shape: .realistic) }
            let spool = try await makeSpool(in: directory, samples: samples)
            let seen = Atomic(0)
            let (struck, strike) = AsyncStream.makeStream(of: Void.self)
            var configuration = DevServerConfiguration()
            configuration.faults.latencyMilliseconds = 3...8
            configuration.ignoreIdempotencyKeys = !keysHonoured
            configuration.onRequest = { _, _ in
                // Mid-upload: the fault strikes once, off the server's thread.
                if seen.add(1, ordering: .relaxed).newValue == 90 { strike.yield() }
            }
            try await withDevServer(configuration) { server in
                // A pool that lost its server may not end when cancelled (vapor/postgres-nio#599):
                // the run leaves it behind after 5 s and exits, by design. Under `make sanitize`
                // LeakSanitizer then reports the abandoned pool's memory at exit, and its exit
                // status would hide the run's; AddressSanitizer's other checks stay on.
                let run = try await spawnSharedRun(
                    spool, against: server, database: database, host: "host-a", lease: "2s",
                    ["--concurrency", "4"], environment: ["ASAN_OPTIONS": "detect_leaks=0"])
                for await _ in struck { break }
                switch fault {
                case .restartImmediately: try await cluster.restart(immediate: true)
                case .terminateConnections: try await cluster.terminateConnections(of: PostgresCluster.role)
                }
                let status = await run.finished()
                #expect(
                    status == 0 || status == 75, "exit \(status): finished, or stopped as for an unreachable database")
                // Whatever the run left in processing/ is taken back once its leases have run out.
                try await waitUntilEveryLeaseHasRunOut(database)
                let next = try await spawnSharedRun(spool, against: server, database: database, host: "host-b")
                #expect(await next.finished() == 0, "\(next.errorText)")
                try await expectAllSyncedOnce(samples, spool: spool, server: server)
            }
        }
    }

    @Test(
        "the worker's privileges revoked mid-run: exit 73 naming the refusal, not a quiet 0; granted again, the next run finishes; every record once"
    )
    func privilegesRevokedMidRun() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let samples = (1...6).map { SampleSession(seed: UInt64(4450 + $0), shape: .realistic) }
            let spool = try await makeSpool(in: directory, samples: samples)
            // The run is paused at its 60th request, bundles under way, whatever the machine's speed.
            let pause = SignalAtRequest(SIGSTOP)
            var configuration = DevServerConfiguration()
            configuration.ignoreIdempotencyKeys = true
            configuration.onRequest = { _, _ in pause.requestArrived() }
            try await withDevServer(configuration) { server in
                let run = try await spawnSharedRun(
                    spool, against: server, database: database, host: "host-a", lease: "5s",
                    ["--concurrency", "2"])
                pause.aim(at: run, after: 60)
                var paused = pause.struck.makeAsyncIterator()
                _ = await paused.next()
                // An administrator's REVOKE (SQLSTATE 42501) while bundles are under way.
                try await database.psql(
                    "REVOKE INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA dopesync FROM \(PostgresCluster.role)")
                run.kill(SIGCONT)
                let status = await run.finished()
                let log = run.errorText
                #expect(status == 73, "\(log)")
                #expect(log.contains("the checkpoint database cannot be written"), "\(log)")
                #expect(log.contains("refuses user \(PostgresCluster.role)"), "\(log)")

                try await database.psql(
                    "GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA dopesync TO \(PostgresCluster.role)")
                try await waitUntilEveryLeaseHasRunOut(database)
                let next = try await spawnSharedRun(spool, against: server, database: database, host: "host-b")
                #expect(await next.finished() == 0, "\(next.errorText)")
                try await expectAllSyncedOnce(samples, spool: spool, server: server)
            }
        }
    }
}

/// The half sessions of issue 38 from the shared store's own SQL: `status` on PostgreSQL lists
/// a bundle whose session is on the server but incomplete, and stops once it is done.
@Suite struct SharedHalfSessionTests {
    @Test("status on PostgreSQL lists a half session after a deferral and stops once the bundle is done")
    func halfSessionOnPostgreSQL() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 9_610)
            let spool = try await makeSpool(in: directory, samples: [sample])
            let api = directory.appendingPathComponent("api.sqlite").path
            func run(_ server: RunningDevServer) async -> (RunSummary, DopeSync.ExitStatus) {
                var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                options.minAge = .zero
                options.minFreeSpace = .bytes(0)
                options.database = database.settings()
                options.deferral = DeferralPolicy(base: .milliseconds(1), cap: .milliseconds(1), maxAttempts: 5)
                return await Worker(options: options, logger: quietLogger).run()
            }
            var firewalled = DevServerConfiguration()
            firewalled.databasePath = api
            firewalled.forbiddenBodyPattern = "wind from 3 o'clock, 0"  // the first DOPE entry's notes
            try await withDevServer(firewalled) { server async throws in
                #expect(await run(server).0.deferred == 1)
            }
            let status = try await SpoolStatus.gather(spool: spool, minAge: .zero, database: database.settings())
            let half = try #require(status.halfSessions.first, "\(status.json())")
            #expect(half.session == sample.sessionID && half.recordsOnServer == 1)
            #expect(half.recordsLeft == sample.expectedRequestCount - 1)

            var open = DevServerConfiguration()
            open.databasePath = api
            try await withDevServer(open) { server async throws in
                #expect(await run(server).0.done == 1)
            }
            let after = try await SpoolStatus.gather(spool: spool, minAge: .zero, database: database.settings())
            #expect(after.halfSessions.isEmpty, "\(after.json())")
        }
    }
}

/// A statement that waits too long is cancelled by the server (`lock_timeout`,
/// `statement_timeout`), not only given up on by the run: its transaction's outcome is known
/// before the run reports anything, and nothing of it commits later.
@Suite struct CancelledStatementTests {
    @Test(
        "a lock held elsewhere: the run exits 75 and leaves no statement of its own waiting in the server to commit later",
        .timeLimit(minutes: 3))
    func aLockWaitIsCancelledByTheServer() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 9_900)])
            let environment = database.runArguments(host: "host-a").environment
            // The schema first (status migrates it), then a session that holds every claim row.
            _ = try await dopesync(
                ["status", "--spool", spool.root, "--database", database.url], environment: environment)
            // Held until the test ends it (below), however long the run takes.
            async let held = database.psql(
                "BEGIN; LOCK TABLE dopesync.claims IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(600); COMMIT;")
            try await waitUntil(
                database, "the claims locked",
                "EXISTS (SELECT 1 FROM pg_locks WHERE relation = 'dopesync.claims'::regclass AND granted "
                    + "AND mode = 'AccessExclusiveLock')")
            try await withDevServer { server in
                let started = ContinuousClock.now
                let run = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await run.finished() == 75)
                #expect(ContinuousClock.now - started < .seconds(30), "the lock is held until the run has ended")
                let waiting = try await database.psql(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'dopesync' "
                        + "AND wait_event_type = 'Lock' AND datname = current_database()")
                #expect(waiting.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "a statement left waiting")
                #expect(try spool.names(.incoming).count == 1, "given back, nothing claimed")
            }
            // The holder ends, its transaction rolled back: anything of the run's still waiting
            // would now go through.
            _ = try await database.psql(
                "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(600)%' "
                    + "AND pid <> pg_backend_pid()")
            _ = try? await held
            let claims = try await database.psql("SELECT count(*) FROM dopesync.claims")
            #expect(claims.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "a claim committed after the run")
        }
    }
}

extension CancelledStatementTests {
    @Test(
        "a transaction whose statements each keep within the limit but together outlast the wait: rolled back, nothing of it commits after the store reported it",
        .timeLimit(minutes: 3))
    func aTransactionThatOutlastsTheWaitIsRolledBack() async throws {
        let database = try await SharedCluster.freshDatabase()
        let owner = ClaimOwner(host: "host-a", pid: 1, runID: "run-a")
        // A wait of 12 s: each statement may take 9.6 s, and each of the failure's two updates
        // (its bundle's row, then its claim's) takes 7 s. (The claim before them needs a wait
        // that a loaded machine keeps within: 8 s was not, once, under the whole suite.)
        try await PostgresCheckpoints.with(
            database.settings(lease: .seconds(3600)), owner: owner, statementTimeout: .seconds(12),
            logger: quietLogger
        ) { store in
            #expect(try await store.acquireClaim(of: "x.tar.gz", orphan: false, owner: owner))
            _ = try await store.recordClaim(
                name: "x.tar.gz", sessionID: "s1", owner: owner, producer: Producer(uid: 0), api: "http://api:80",
                totalSteps: 3, now: Date())
            try await database.psql(
                """
                CREATE FUNCTION dopesync.slow() RETURNS trigger LANGUAGE plpgsql
                    AS $$ BEGIN PERFORM pg_sleep(7); RETURN NEW; END $$;
                CREATE TRIGGER slow BEFORE UPDATE ON dopesync.bundles FOR EACH ROW EXECUTE FUNCTION dopesync.slow();
                CREATE TRIGGER slow BEFORE UPDATE ON dopesync.claims FOR EACH ROW EXECUTE FUNCTION dopesync.slow();
                """)
            let failure = BundleFailure(reason: .gaveUp, message: "test")
            await #expect {
                try await store.recordFailure(
                    name: "x.tar.gz", sessionID: "s1", error: failure, finalName: "x.tar.gz")
            } throws: { ($0 as? CheckpointError)?.code == .unreachable }
            // Until the server has ended every statement of this store's (the suite's other
            // databases share the server): one left running could still commit.
            try await waitUntil(
                database, "every statement of the store ended",
                "NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'dopesync' AND state <> 'idle' "
                    + "AND datname = current_database())")
            #expect(
                try await database.psql("SELECT last_outcome FROM dopesync.bundles WHERE name = 'x.tar.gz'")
                    == "claimed", "the failure committed after the store had reported it failed")
        }
    }
}
