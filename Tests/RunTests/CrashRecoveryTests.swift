import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Logging
import SQLiteSupport
import Testing

@testable import DopeSync

#if canImport(Glibc)
    import Glibc
#endif

/// Real processes killed with SIGKILL: `dopesync run` at random moments, and the API itself in
/// the middle of a run. Nothing is lost and nothing is created twice.
@Suite struct CrashRecoveryTests {
    @Test(
        "SIGKILLed 20 times over 30 bundles, then a last run: every record exactly once, every bundle in done/",
        arguments: keysHonouredOrIgnored)
    func killedRunsLoseNothingAndDuplicateNothing(keysHonoured: Bool) async throws {
        try await withTemporaryDirectory { directory in
            // About 50 requests a bundle, and a server a few milliseconds slow: a request is in
            // flight when its child is killed.
            let samples = (1...30).map { SampleSession(seed: UInt64(900 + $0), shape: .realistic) }
            let spool = try await makeSpool(in: directory, samples: samples)
            // Each child is killed when the server has seen a random number of requests since it
            // started (0: at once, in its start-up), as the request that makes the count arrives:
            // mid-upload, whatever the machine's speed, with a request of it in flight.
            let killer = SignalAtRequest(SIGKILL)
            var configuration = DevServerConfiguration()
            configuration.faults.latencyMilliseconds = 10...20
            configuration.ignoreIdempotencyKeys = !keysHonoured
            configuration.onRequest = { _, _ in killer.requestArrived() }
            try await withDevServer(configuration) { server in
                var generator = SplitMix64(seed: 2026)
                var kills = 0
                var children = 0
                // Until 20 children died by SIGKILL mid-run (a child that finished first does not count).
                while kills < 20, children < 80 {
                    children += 1
                    let child = try await spawnRun(spool, against: server)
                    let after = Int.random(in: 0...120, using: &generator)
                    killer.aim(at: child, after: after)
                    let status = await child.finished()
                    killer.disarm()
                    if status == 128 + SIGKILL { kills += 1 }
                }
                let last = try await spawnRun(spool, against: server)
                #expect(await last.finished() == 0)

                #expect(kills >= 20, "\(kills) kills in \(children) children")
                #expect(try spool.names(.done).count == samples.count)
                #expect(try spool.names(.processing).isEmpty)
                #expect(try spool.names(.incoming).isEmpty)
                let created = try await server.createdCounts()
                #expect(created["session"] == samples.count)
                #expect(created.values.reduce(0, +) == samples.reduce(0) { $0 + $1.expectedRequestCount })
            }
        }
    }

    /// A real `dopesync-devserver` process on `port` (0: a free one), its records in `database`; it
    /// logs a line for each request on its standard error, piped (read it, or it fills up).
    static func startServer(port: Int, database: String) async throws -> (server: Spawned, url: String) {
        let server = try await Spawned(
            builtProduct("dopesync-devserver").path,
            ["--port", "\(port)", "--db", database, "--token", "t", "--latency-ms", "10-20", "--log-level", "info"],
            errors: .piped)
        let line = await onOwnThread { server.output.readLine() } ?? ""
        guard line.hasPrefix("listening on ") else {
            server.kill(SIGKILL)
            _ = await server.finished()
            throw POSIXError(.EADDRINUSE)  // the only way it fails to print the line here
        }
        return (server, String(line.dropFirst("listening on ".count)))
    }

    /// ``startServer(port:database:)`` on a port below the kernel's ephemeral ports (32768 and
    /// up), tried until one is free: no other test's server on port 0 can take it while this one is
    /// down. One did, and the run went on against that server.
    static func startServerBelowTheEphemeralPorts(database: String) async throws -> (server: Spawned, url: String) {
        var attempt = 1
        while true {
            do {
                return try await startServer(port: Int.random(in: 20_000..<32_768), database: database)
            } catch let error as POSIXError where error.code == .EADDRINUSE && attempt < 20 {
                attempt += 1
            }
        }
    }

    @Test(
        "the API killed mid-run and back on the same port once the run has met the outage: the run rides it out, every record once"
    )
    func apiRestartMidRun() async throws {
        try await withTemporaryDirectory { directory in
            // About 50 requests a bundle at 10-20 ms, two at a time: the run lasts about 4 s.
            let samples = (1...10).map { SampleSession(seed: UInt64(870 + $0), shape: .realistic) }
            let spool = try await makeSpool(in: directory, samples: samples)
            let database = directory.appendingPathComponent("server.sqlite").path
            var (server, url) = try await Self.startServerBelowTheEphemeralPorts(database: database)
            let port = try #require(url.split(separator: ":").last.flatMap { Int($0) })

            var options = RunOptions(spoolRoot: spool.root, apiURL: url, token: "t")
            options.minAge = .zero
            options.concurrency = 2
            let (retries, retried) = AsyncStream.makeStream(of: Void.self)
            let logger = Logger(label: "dopesync.test") { _ in
                MessageHandler { if $0 == "retrying a step" { retried.yield() } }
            }
            let run = Task { await Worker(options: options, logger: logger).run() }
            // A deploy restarts the API early in the run: killed at its 40th request (of about 500)...
            let serverLog = try #require(server.errors).lines()
            var requests = 0
            for await line in serverLog where line.contains(" request ") || line.hasSuffix(" request") {
                requests += 1
                if requests == 40 { break }
            }
            server.kill(SIGKILL)
            _ = await server.finished()
            // ... and back on the same port once the run has met the outage (a step to try again).
            for await _ in retries { break }
            var restarted: Spawned? = nil
            for attempt in 1...20 where restarted == nil {
                do {
                    (restarted, _) = try await Self.startServer(port: port, database: database)
                } catch let error as POSIXError where error.code == .EADDRINUSE && attempt < 20 {}  // a neighbour's
            }
            server = try #require(restarted)
            _ = server.errors?.lines()  // read, so that its log never fills the pipe

            let (summary, status) = await run.value
            #expect(status == .success, "\(summary.line)")
            #expect(summary.done == samples.count && summary.deferred == 0, "\(summary.line)")
            #expect(try spool.names(.done).count == samples.count)

            server.kill(SIGTERM)
            _ = await server.finished()

            // The server's own records, from its database (its /admin/stats counts only what the
            // second process created): every record of every bundle, each exactly once.
            let records = try await onOwnThread {
                try SQLiteDatabase(path: database).read { connection in
                    try connection.query(
                        "SELECT kind, count(*) AS count, count(DISTINCT client_id) AS distinct_ids FROM records GROUP BY kind"
                    ).map { row in
                        (
                            kind: try row["kind"] as String, count: try row["count"] as Int,
                            distinct: try row["distinct_ids"] as Int
                        )
                    }
                }
            }
            #expect(records.first { $0.kind == "session" }?.count == samples.count)
            #expect(
                records.reduce(0) { $0 + $1.count } == samples.reduce(0) { $0 + $1.expectedRequestCount }, "\(records)")
            #expect(records.allSatisfy { $0.count == $0.distinct }, "zero duplicates: \(records)")
        }
    }
}

/// A log handler that hands each message's text to `heard`: for a test that waits for what the
/// run says, or (`withMetadata`, the event's metadata after the text) shows it when it fails.
struct MessageHandler: LogHandler {
    let heard: @Sendable (String) -> Void
    let withMetadata: Bool
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info

    init(withMetadata: Bool = false, _ heard: @escaping @Sendable (String) -> Void) {
        self.withMetadata = withMetadata
        self.heard = heard
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        guard withMetadata, let metadata = event.metadata, !metadata.isEmpty else {
            return heard(event.message.description)
        }
        heard("\(event.message) \(metadata)")
    }
}
