import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A spool has one store: a host whose job file forgot `database:` (so it would keep its
/// checkpoints in the spool's SQLite file) and a host on PostgreSQL, on one spool at once against
/// an API that ignores keys, once sent records twice. Now the second to start refuses.
@Suite struct OneStoreASpoolTests {
    enum First: String, CustomTestStringConvertible, CaseIterable {
        case sqlite, postgresql
        var testDescription: String { "\(rawValue) first" }
    }

    /// `dopesync run` on SQLite or on the shared database, logging into its output.
    static func start(
        _ store: First, _ spool: Spool, server: RunningDevServer, database: SharedDatabase
    ) async throws -> Spawned {
        let run =
            store == .sqlite
            ? try await spawnRunLogging(spool, against: server, ["--concurrency", "2"])
            : try await spawnSharedRun(
                spool, against: server, database: database, host: "host-pg", logging: true, ["--concurrency", "2"])
        return run
    }

    @Test(
        "a SQLite host and a PostgreSQL host on one spool, keys ignored: the second refuses with 78, nothing is sent twice",
        arguments: First.allCases)
    func theSecondStoreRefuses(first: First) async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let samples = (1...8).map { SampleSession(seed: UInt64(4800 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            var configuration = DevServerConfiguration()
            configuration.faults.latencyMilliseconds = 3...8
            configuration.ignoreIdempotencyKeys = true
            try await withDevServer(configuration) { server in
                // Its output is read to its end by `firstLine`'s reader, never left to fill a pipe.
                let firstRun = try await Self.start(first, spool, server: server, database: database)
                // The first holds a bundle: the spool is bound by then.
                #expect(await firstRun.firstLine(containing: "reading the bundle") != nil)
                let second: First = first == .sqlite ? .postgresql : .sqlite
                let secondRun = try await Self.start(second, spool, server: server, database: database)
                let refusal = String(
                    decoding: await onOwnThread { secondRun.output.readDataToEndOfFile() }, as: UTF8.self)
                #expect(await secondRun.finished() == 78, "\(refusal)")
                #expect(refusal.contains("dopesync.store says"), "\(refusal)")
                #expect(
                    refusal.contains("the SQLite file") && refusal.contains("the PostgreSQL database"), "\(refusal)")
                #expect(!refusal.contains("reading the bundle"), "the refused run claimed something: \(refusal)")

                #expect(await firstRun.finished() == 0)
                try await expectAllSyncedOnce(samples, spool: spool, server: server)
            }
        }
    }

    @Test("a bundle in processing/ whose lock a process outside the store holds, with no lease: never taken over")
    func aLockWithoutALeaseIsNeverTakenOver() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporaryDirectory { directory in
            let samples = (1...2).map { SampleSession(seed: UInt64(4820 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            // A claim made outside the store (an older dopesync, a run given the SQLite file): the
            // bundle renamed into processing/ and its flock held, no lease in the database.
            let held = "\(samples[0].sessionID).tar.gz"
            #expect(rename(spool.path(.incoming, held), spool.path(.processing, held)) == 0)
            let holder = try await Spawned.holdingLock(on: spool.path(.processing, held))
            try await withDevServer { server in
                let run = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await run.finished() == 0, "\(run.errorText)")
                #expect(try spool.names(.processing) == [held])
                #expect(try spool.names(.done) == ["\(samples[1].sessionID).tar.gz"])
                // Its claimer gone (the lock free), the next run takes it back and finishes it.
                try holder.input.close()
                #expect(await holder.finished() == 0)
                let again = try await spawnSharedRun(spool, against: server, database: database, host: "host-a")
                #expect(await again.finished() == 0, "\(again.errorText)")
                try await expectAllSyncedOnce(samples, spool: spool, server: server)
            }
        }
    }
}
