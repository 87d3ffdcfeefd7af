import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

/// A spool on a `hard` NFS mount whose server stalls: a real file system (FUSE,
/// ``StallingFileSystem``) holds one bundle's move to `done/` in the kernel, and with it every
/// other move between the spool's folders. The run's spool calls are on threads of their own
/// (`SpoolCalls`), so the stall holds those threads only: the event loops, with the other
/// bundles' uploads and every lease's renewal, go on.
@Suite struct StalledSpoolTests {
    @Test(
        "a move held in the kernel past a lease: the other bundles go on uploading, every lease is renewed, and all finish once the file system answers",
        .enabled(
            if: geteuid() == 0 && FileManager.default.fileExists(atPath: "/dev/fuse"), "mounting needs root and FUSE"),
        .timeLimit(.minutes(3)))
    func aStalledFileSystemHoldsNoLoop() async throws {
        let database = try await SharedCluster.freshDatabase()
        var tiny = SampleSession.Shape()
        (tiny.dopeEntries, tiny.chronoSessions, tiny.groups) = (1, 0, 0)
        var large = SampleSession.Shape()
        (large.dopeEntries, large.chronoSessions, large.readingsPerChrono) = (30, 2, 10)
        // The tiny bundle finishes first, while the three large ones are still uploading.
        let held = SampleSession(seed: 4901, shape: tiny)
        let others = (2...4).map { SampleSession(seed: UInt64(4900 + $0), shape: large) }
        let heldName = "\(held.sessionID).tar.gz"
        try await withTemporaryDirectory { directory in
            try await StallingFileSystem.with(in: directory, holdingRenamesOf: "processing/\(heldName)") { fileSystem in
                let spool = try await makeSpool(in: fileSystem.mountPoint, samples: [held] + others)
                var configuration = DevServerConfiguration()
                configuration.faults.latencyMilliseconds = 2...5
                try await withDevServer(configuration) { server in
                    let run = try await spawnSharedRun(
                        spool, against: server, database: database, host: "host-a", lease: "2s", logging: true,
                        ["--concurrency", "4"])
                    // The run's log read from its start (a pipe left full would hold its logger),
                    // counting the other three's steps as the run says each is answered.
                    let steps = others.reduce(0) { $0 + $1.expectedRequestCount }
                    let otherNames = others.map { "\($0.sessionID).tar.gz" }
                    let answered = Task {
                        var count = 0
                        for await line in run.lines()
                        where line.contains("step done") && otherNames.contains(where: { line.contains($0) }) {
                            count += 1
                            if count == steps { break }
                        }
                        return count
                    }
                    guard await fileSystem.held(before: run) else {
                        let status = await run.finished()
                        Issue.record("the run ended before the file system held a move: exit \(status)")
                        return
                    }
                    let sentBeforeTheStall = try await server.requestLog().count
                    // Held until every claim's lease has been renewed a whole lease (2 s) after the
                    // hold began: unrenewed, each would have run out. Asked in the database, which
                    // keeps the leases' clock; a minute without it fails the test.
                    let heldAt = try await database.psql("SELECT extract(epoch FROM clock_timestamp())")
                    do {
                        try await waitUntil(
                            database, "every lease renewed during the stall",
                            "(SELECT count(*) = 4 AND bool_and(lease_expires_at >= \(heldAt) + 4) FROM dopesync.claims)"
                        )
                    } catch {
                        // Not a hang, nor a run left behind: the run goes on once the move does.
                        Issue.record(error, "the leases were not renewed during the stall")
                        fileSystem.release()
                        _ = await run.finished()
                        return
                    }
                    // Every lease was renewed all along: still this run's, none run out. (A loop
                    // held by the stall renews nothing: the test ends here, without waiting for
                    // steps that will not come.)
                    let leases = try await database.psql(
                        """
                        SELECT count(*) FILTER (WHERE run_id IS NOT NULL AND lease_expires_at > extract(epoch FROM clock_timestamp())),
                               count(*)
                        FROM dopesync.claims
                        """)
                    guard leases == "4|4" else {
                        Issue.record("leases live, of all claims: \(leases)")
                        fileSystem.release()
                        _ = await run.finished()
                        return
                    }
                    // The other bundles uploaded all their steps while the move was held. (The
                    // test's time limit cancels the wait, and the count with it, should they not.)
                    let count = await withTaskCancellationHandler {
                        await answered.value
                    } onCancel: {
                        answered.cancel()
                    }
                    #expect(
                        count == steps, "\(count) of the other bundles' \(steps) steps answered while the move was held"
                    )
                    let sentDuringTheStall = try await server.requestLog().count - sentBeforeTheStall
                    #expect(
                        sentDuringTheStall >= 10, "only \(sentDuringTheStall) requests reached the API during the stall"
                    )
                    // The stall is the whole mount's, as a stalled server's is: the other moves
                    // wait behind the held one (read on the disk beneath, past the stall).
                    let doneOnDisk = try fileNames(in: fileSystem.backing.appendingPathComponent("spool/done").path)
                    #expect(doneOnDisk.isEmpty, "\(doneOnDisk)")
                    fileSystem.release()
                    #expect(await run.finished() == 0)
                    try await expectAllSyncedOnce([held] + others, spool: spool, server: server)
                }
            }
        }
    }
}
