import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

/// `prune` forgets a done bundle's rows, and its session's steps when no bundle row names the
/// session any more. A continuation of that session claimed at the same moment must keep them:
/// its claim's record, not yet committed, is invisible to the check under READ COMMITTED.
@Suite struct ForgetRaceTests {
    @Test("prune's forget and a claim of the same session at once: the session's steps survive the forget")
    func forgetWaitsForAClaimInProgress() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 9_950)
            let spool = try makeSpool(in: directory, samples: [sample])
            let (options, environment) = database.runArguments(host: "host-a")
            try await withDevServer { server in
                let run = try spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await run.finished() == 0)
            }
            let stepsBefore = try await database.psql(
                "SELECT count(*) FROM dopesync.steps WHERE session_id = '\(sample.sessionID)'"
            ).trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(Int(stepsBefore) == sample.expectedRequestCount)
            // A continuation's claim in progress, as `RecordClaim` makes it: its fence on the
            // claims, and its bundle row naming the session, committed two seconds later.
            async let claim = database.psql(
                """
                BEGIN;
                SELECT 1 FROM dopesync.claims FOR SHARE;
                INSERT INTO dopesync.bundles (name, session_id, first_seen, last_outcome, updated_at, steps_total)
                VALUES ('continuation.tar.gz', '\(sample.sessionID)', extract(epoch FROM now()), 'claimed',
                        extract(epoch FROM now()), \(sample.expectedRequestCount + 1));
                SELECT pg_sleep(2);
                COMMIT;
                """)
            var holding = "0"
            while holding != "1" {
                holding = try await database.psql(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(2)%' AND state = 'active' "
                        + "AND pid <> pg_backend_pid()"
                ).trimmingCharacters(in: .whitespacesAndNewlines)
            }
            let pruned = try await dopesync(
                ["prune", "--spool", spool.root, "--older-than", "1ms"] + options.prefix(2), environment: environment)
            #expect(pruned.status == 0, "\(pruned.stderr)")
            #expect(pruned.stdout.contains("pruned 1 bundle"), "\(pruned.stdout)")
            _ = try await claim
            let stepsAfter = try await database.psql(
                "SELECT count(*) FROM dopesync.steps WHERE session_id = '\(sample.sessionID)'"
            ).trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(stepsAfter == stepsBefore, "the continuation's session lost its steps to the forget")
        }
    }
}
