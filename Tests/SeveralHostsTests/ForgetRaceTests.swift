import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

/// `prune` forgets a done bundle's rows, and its session's steps when no bundle row names the
/// session any more. A continuation of that session claimed at the same moment must keep them:
/// its claim's record, not yet committed, is invisible to the check under READ COMMITTED.
@Suite struct ForgetRaceTests {
    @Test(
        "prune's forget against the worker's own claim of a continuation, held mid-statement: the session's steps survive",
        .timeLimit(minutes: 3))
    func forgetWaitsForTheWorkersClaimInProgress() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 9_951)
            let spool = try await makeSpool(in: directory, samples: [sample])
            let environment = database.runArguments(host: "host-a").environment
            try await withDevServer { server in
                let run = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await run.finished() == 0, "\(run.errorText)")
            }
            let steps = "SELECT count(*) FROM dopesync.steps WHERE session_id = '\(sample.sessionID)'"
            let stepsBefore = try await database.psql(steps)
            #expect(Int(stepsBefore) == sample.expectedRequestCount)
            // The worker's claim of a continuation (RecordClaim, as a run sends it) is held inside
            // its statement, after its fence on the claims, by a trigger on its bundle row: until
            // prune is seen waiting for the claims, or 30 s (then the claim fails, and the test).
            try await database.psql(
                """
                CREATE FUNCTION dopesync.hold_claim() RETURNS trigger LANGUAGE plpgsql AS $$
                DECLARE deadline timestamptz := clock_timestamp() + interval '30 seconds'; BEGIN
                  WHILE NOT EXISTS (SELECT 1 FROM pg_locks WHERE relation = 'dopesync.claims'::regclass
                                    AND NOT granted) LOOP
                    IF clock_timestamp() > deadline THEN RAISE 'prune never waited for the claim'; END IF;
                    PERFORM pg_sleep(0.01);
                  END LOOP;
                  RETURN NEW;
                END $$;
                CREATE TRIGGER hold_claim BEFORE INSERT OR UPDATE ON dopesync.bundles FOR EACH ROW
                    WHEN (NEW.name = 'continuation.tar.gz') EXECUTE FUNCTION dopesync.hold_claim();
                """)
            let owner = ClaimOwner(host: "host-b", pid: 2, runID: "run-b")
            try await PostgresCheckpoints.with(
                database.settings(lease: .seconds(3600)), owner: owner, statementTimeout: .seconds(60),
                logger: quietLogger
            ) { store in
                #expect(try await store.acquireClaim(of: "continuation.tar.gz", orphan: false, owner: owner))
                async let claim = store.recordClaim(
                    name: "continuation.tar.gz", sessionID: sample.sessionID, owner: owner,
                    producer: Producer(uid: getuid()), api: "http://api:80",
                    totalSteps: sample.expectedRequestCount + 1, now: Date())
                // Held once the trigger runs (its statement is the claim's).
                try await waitUntil(
                    database, "the claim held in its statement",
                    anotherSession(where: "wait_event = 'PgSleep'"))
                let pruned = try await dopesync(
                    ["prune", "--spool", spool.root, "--older-than", "1ms", "--database", database.url],
                    environment: environment)
                #expect(pruned.status == 0, "\(pruned.stderr)")
                #expect(pruned.stdout.contains("pruned 1 bundle"), "\(pruned.stdout)")
                _ = try await claim
            }
            #expect(try await database.psql(steps) == stepsBefore, "the continuation's session lost its steps")
        }
    }
}
