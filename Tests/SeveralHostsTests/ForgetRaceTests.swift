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
        "prune's forget and a claim of the same session at once: the session's steps survive the forget",
        .timeLimit(minutes: 3))
    func forgetWaitsForAClaimInProgress() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 9_950)
            let spool = try await makeSpool(in: directory, samples: [sample])
            let environment = database.runArguments(host: "host-a").environment
            try await withDevServer { server in
                let run = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await run.finished() == 0, "\(run.errorText)")
            }
            let stepsBefore = try await database.psql(
                "SELECT count(*) FROM dopesync.steps WHERE session_id = '\(sample.sessionID)'"
            ).trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(Int(stepsBefore) == sample.expectedRequestCount)
            // A continuation's claim in progress, as `RecordClaim` makes it: its fence on the
            // claims and its bundle row naming the session, committed only once prune is seen
            // waiting for a lock on the claims (so the two did overlap), or never if it does not
            // wait (the holder then fails after 30 s, and so does the test).
            async let claim = database.psql(
                """
                BEGIN;
                SELECT 1 FROM dopesync.claims FOR SHARE;
                INSERT INTO dopesync.bundles (name, session_id, first_seen, last_outcome, updated_at, steps_total)
                VALUES ('continuation.tar.gz', '\(sample.sessionID)', extract(epoch FROM now()), 'claimed',
                        extract(epoch FROM now()), \(sample.expectedRequestCount + 1));
                DO $$ DECLARE deadline timestamptz := clock_timestamp() + interval '30 seconds'; BEGIN
                  WHILE NOT EXISTS (SELECT 1 FROM pg_locks WHERE relation = 'dopesync.claims'::regclass
                                    AND NOT granted) LOOP
                    IF clock_timestamp() > deadline THEN RAISE 'prune never waited for the claim'; END IF;
                    PERFORM pg_sleep(0.01);
                  END LOOP;
                END $$;
                COMMIT;
                """)
            // The holder is in place once its fence is granted (asked inside the server, not by a
            // psql a try).
            try await waitUntil(
                database, "the claim's fence granted",
                "EXISTS (SELECT 1 FROM pg_locks WHERE relation = 'dopesync.claims'::regclass AND granted "
                    + "AND mode = 'RowShareLock' AND pid <> pg_backend_pid())")
            let pruned = try await dopesync(
                ["prune", "--spool", spool.root, "--older-than", "1ms", "--database", database.url],
                environment: environment)
            #expect(pruned.status == 0, "\(pruned.stderr)")
            #expect(pruned.stdout.contains("pruned 1 bundle"), "\(pruned.stdout)")
            _ = try await claim  // throws if prune never waited for it
            let stepsAfter = try await database.psql(
                "SELECT count(*) FROM dopesync.steps WHERE session_id = '\(sample.sessionID)'"
            ).trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(stepsAfter == stepsBefore, "the continuation's session lost its steps to the forget")
        }
    }
}
