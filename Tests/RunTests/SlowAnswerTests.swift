import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// An API (or a proxy) that sends its answer's head at once and its body one byte at a time,
/// against the dev server's `--slow-body` over real sockets: a request's deadline covers its
/// whole answer, and a stop ends what is in flight after a grace, whatever the server does.
@Suite(.timeLimit(minutes: 3)) struct SlowAnswerTests {
    @Test("an answer sent one byte a second fails at the request's deadline, not a byte's read timeout later")
    func aSlowBodyEndsAtTheDeadline() async throws {
        var configuration = DevServerConfiguration()
        // A byte a second (three under a sanitizer, whose load slows the timers as much).
        configuration.slowBody = .init(pathPrefix: "/api/health", byteInterval: .seconds(sanitizerSlowdown))
        try await withDevServer(configuration) { server in
            var timeouts = APIClient.Timeouts()
            timeouts.request = .seconds(2)  // the health answer's 15 bytes take 15 s (45 s)
            let (answer, took) = try await APIClient.with(
                baseURL: server.baseURL, credential: Credential(token: server.token), connections: 1,
                timeouts: timeouts
            ) { client in
                let started = ContinuousClock.now
                let answer = await client.get("/api/health")
                return (answer, ContinuousClock.now - started)
            }
            guard case .failed(.retryable(nil, _, let message)) = answer else {
                Issue.record("the slow answer was taken: \(answer)")
                return
            }
            #expect(message == "timed out")
            // Well under the body's 15 s (45 s), with room for a loaded machine's timers.
            #expect(took < .seconds(10 * sanitizerSlowdown), "\(took)")
        }
    }

    @Test("a stop's grace over: a request still reading a slow answer ends at once, not when the body does")
    func aStopEndsASlowAnswerAfterItsGrace() async throws {
        var configuration = DevServerConfiguration()
        configuration.slowBody = .init(pathPrefix: "/api/health", byteInterval: .seconds(1))
        try await withDevServer(configuration) { server in
            let stop = StopRequest(grace: .milliseconds(300))
            let (answer, took) = try await APIClient.with(
                baseURL: server.baseURL, credential: Credential(token: server.token), connections: 1, stop: stop
            ) { client in
                let started = ContinuousClock.now
                stop.request()
                let answer = await client.get("/api/health")
                return (answer, ContinuousClock.now - started)
            }
            guard case .failed(.retryable(nil, _, let message)) = answer else {
                Issue.record("the slow answer was taken: \(answer)")
                return
            }
            #expect(message.contains("asked to stop"), "\(message)")
            #expect(took < .seconds(8), "\(took): the body takes 15 s")
        }
    }

    @Test(
        "SIGTERM while the API sends a create's answer one byte every 5 s: the run exits within its grace plus 5 s (not the minutes the answer takes), gives the bundle back uncounted, and the next run sends each record once",
        .timeLimit(minutes: 3))
    func sigtermDuringASlowAnswer() async throws {
        try await withTemporarySpool { spool, scratch in
            let sample = SampleSession(seed: 9_400, shape: .realistic)
            let name = try pack(sample, into: spool, scratch: scratch)
            let (posts, post) = AsyncStream.makeStream(of: Void.self)
            var slow = DevServerConfiguration()
            slow.databasePath = scratch.appendingPathComponent("api.sqlite").path
            slow.slowBody = .init(method: "POST", pathPrefix: "/api/sessions", byteInterval: .seconds(5))
            slow.onRequest = { method, path in if method == "POST" && path == "/api/sessions" { post.yield() } }
            try await withDevServer(slow) { server in
                let run = try await spawnRun(spool, against: server)
                for await _ in posts { break }
                let signalled = ContinuousClock.now
                run.kill(SIGTERM)
                let status = await run.finished()
                let took = ContinuousClock.now - signalled
                // 5 s for a debug build to give the bundle back and exit on a loaded machine: the answer
                // itself would take minutes.
                #expect(took < StopRequest().grace + .seconds(5 * sanitizerSlowdown), "\(took)")
                #expect(status == 0, "a stop asked for is a normal end")
            }
            #expect(try spool.names(.incoming) == [name])
            #expect(try CheckpointStore(spool: spool).bundleState(name: name)?.attempts ?? 0 == 0)

            var prompt = DevServerConfiguration()
            prompt.databasePath = slow.databasePath
            try await withDevServer(prompt) { server in
                let run = try await spawnRun(spool, against: server)
                #expect(await run.finished() == 0)
                #expect(try spool.names(.done) == [name])
                // The session, created before its slow answer, is looked up, not sent again.
                let created = try await server.createdCounts()
                #expect(created["session", default: 0] == 0, "\(created)")
                #expect(created.values.reduce(0, +) == sample.expectedRequestCount - 1, "\(created)")
            }
        }
    }
}
