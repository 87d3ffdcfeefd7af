import AsyncHTTPClient
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import NIOHTTP1
import Testing

@testable import DopeSync

/// An API URL that does not lead to the API (a redirecting proxy, one path segment too many) and
/// answers that do not confirm a create: none of them may cost a bundle, or be recorded as done.
@Suite struct MisdirectedAPITests {
    /// Every step checkpointed as done, over the sessions of `samples`.
    static func stepsDone(_ spool: Spool, _ samples: [SampleSession]) throws -> Int {
        let store = try CheckpointStore(spool: spool)
        return try samples.reduce(0) { $0 + (try store.completedSteps(sessionID: $1.sessionID)).count }
    }

    @Test(
        "a redirect (301, 302, 307, 308) to a page that says 'created' is never followed: nothing recorded, nothing in done/ or failed/, exit 78",
        arguments: [301, 302, 307, 308])
    func redirectsAreNeverFollowed(status: Int) async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...3).map { SampleSession(seed: UInt64(2300 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            var configuration = DevServerConfiguration()
            configuration.redirectStatus = status
            try await withDevServer(configuration) { server in
                let (summary, exit) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(exit == .configuration)
                #expect(summary.done == 0 && summary.failed == 0 && summary.deferred == 0)
                #expect(summary.givenBack == summary.claimed && summary.claimed > 0)
                #expect(try spool.names(.done).isEmpty && spool.names(.failed).isEmpty)
                #expect(try spool.names(.incoming).count == samples.count)
                #expect(try Self.stepsDone(spool, samples) == 0)
                let log = try await server.requestLog()
                #expect(!log.contains { $0.path.hasPrefix(DevServerConfiguration.redirectTargetPath) }, "followed")
                #expect(try await server.createdCounts().values.reduce(0, +) == 0)
            }
        }
    }

    @Test("a misdirected API (exit 78) still rewrites the metrics file: 78 and the bundles given back")
    func misdirectedRunWritesItsMetrics() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(
                in: directory, samples: [SampleSession(seed: 2311), SampleSession(seed: 2312)])
            let metrics = directory.appendingPathComponent("dopesync.prom").path
            try "dopesync_last_run_exit_code 0\n".write(toFile: metrics, atomically: true, encoding: .utf8)
            var configuration = DevServerConfiguration()
            configuration.redirectStatus = 302
            try await withDevServer(configuration) { server in
                var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                options.minAge = .zero
                options.minFreeSpace = .bytes(0)
                options.metricsFile = metrics
                let (_, exit) = await Worker(options: options, logger: quietLogger).run()
                #expect(exit == .configuration)
                let written = try String(contentsOfFile: metrics, encoding: .utf8)
                #expect(written.contains("dopesync_last_run_exit_code 78\n"), "\(written)")
                #expect(written.contains(#"dopesync_spool_bundles{folder="incoming"} 2"#), "\(written)")
            }
        }
    }

    @Test("the run says why it stopped: the redirect's status, where it pointed and the URL, its password masked")
    func redirectIsExplained() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 2310)])
            var configuration = DevServerConfiguration()
            configuration.redirectStatus = 302
            try await withDevServer(configuration) { server in
                let url = server.baseURL.replacingOccurrences(of: "://", with: "://operator:Passw0rd@")
                let (status, output) = try await runToEnd(spool, apiURL: url, token: server.token)
                #expect(status == 78, "\(output)")
                #expect(output.contains("answered 302, a redirect to /elsewhere/api/sessions"), "\(output)")
                #expect(output.contains("exit 78"), "\(output)")
                #expect(output.contains("http://***@127.0.0.1"), "\(output)")
                #expect(!output.contains("Passw0rd"), "\(output)")
                #expect(output.contains("1 given back"), "\(output)")
            }
        }
    }

    @Test(
        "a base URL one segment too long fails no bundle (exit 78, the URL named); the right URL then syncs each once")
    func wrongBaseURLFailsNoBundle() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...3).map { SampleSession(seed: UInt64(2320 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            try await withDevServer { server in
                let wrong = server.baseURL + "/api"
                let (status, output) = try await runToEnd(spool, apiURL: wrong, token: server.token)
                #expect(status == 78, "\(output)")
                #expect(output.contains(wrong), "\(output)")
                #expect(try spool.names(.failed).isEmpty && spool.names(.done).isEmpty)
                #expect(try spool.names(.incoming).count == samples.count)

                let (_, exit) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(exit == .success)
                #expect(try spool.names(.done).count == samples.count)
                let created = try await server.createdCounts()
                #expect(created["session"] == samples.count)
                #expect(created["dope"] == samples.reduce(0) { $0 + $1.dopeEntryIDs.count })
            }
        }
    }

    @Test(
        "a 201 that does not name the clientId sent is not a create: against a server without lookups nothing is recorded, the bundle waits"
    )
    func createWithoutClientIDIsNotRecorded() async throws {
        try await withTemporaryDirectory { directory in
            let samples = [SampleSession(seed: 2330)]
            let spool = try await makeSpool(in: directory, samples: samples)
            var configuration = DevServerConfiguration()
            configuration.answerCreatesWithoutClientID = true
            configuration.lookups = false
            try await withDevServer(configuration) { server in
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(try Self.stepsDone(spool, samples) == 0)
                #expect(try spool.names(.done).isEmpty && spool.names(.failed).isEmpty)
                #expect(try spool.names(.incoming).count == 1)
                #expect(status == 0 || status == 75, "\(output)")
                #expect(output.contains("does not confirm the create of clientId \(samples[0].sessionID)"), "\(output)")
                #expect(output.contains("reason=unconfirmed_create"), "\(output)")
            }
        }
    }

    @Test(
        "with lookups, a create whose answer names no clientId is recorded from the server's own tree, each record once"
    )
    func createWithoutClientIDIsConfirmedByLooking() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...2).map { SampleSession(seed: UInt64(2340 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            var configuration = DevServerConfiguration()
            configuration.answerCreatesWithoutClientID = true
            try await withDevServer(configuration) { server in
                let (summary, exit) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(exit == .success && summary.done == samples.count)
                let created = try await server.createdCounts()
                #expect(created["session"] == samples.count)
                #expect(created.values.reduce(0, +) == samples.reduce(0) { $0 + $1.expectedRequestCount })
            }
        }
    }

    @Test(
        "HTML says 'not the API' only where the API's own answer was due (2xx, 404, 405); a proxy's HTML 502 or 413 is judged by its status"
    )
    func htmlOnlyMisdirectsWhereTheAPIAnswerWasDue() {
        func html(_ status: HTTPResponseStatus) -> HTTPClientResponse {
            HTTPClientResponse(status: status, headers: ["Content-Type": "text/html; charset=utf-8"])
        }
        let url = "https://ops:Secr3t@api.example/api/sessions"
        for status in [HTTPResponseStatus.ok, .created, .notFound, .methodNotAllowed] {
            #expect(APIClient.misdirection(html(status), url: url) != nil, "\(status)")
        }
        for status in [HTTPResponseStatus.badGateway, .payloadTooLarge, .serviceUnavailable, .unauthorized] {
            #expect(APIClient.misdirection(html(status), url: url) == nil, "\(status)")
        }
        let redirect = HTTPClientResponse(status: .found, headers: ["Location": "https://login.example/?next=x"])
        let message = APIClient.misdirection(redirect, url: url) ?? ""
        #expect(message.contains("302") && message.contains("https://login.example/?next=x"), "\(message)")
        #expect(!message.contains("Secr3t") && message.contains("https://***@api.example"), "\(message)")
    }
}
