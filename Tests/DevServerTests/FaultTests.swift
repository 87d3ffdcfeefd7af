import AsyncHTTPClient
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import NIOCore
import NIOHTTP1
import Testing

@Suite struct FaultTests {
    static func configuration(_ change: (inout FaultConfiguration) -> Void) -> DevServerConfiguration {
        var configuration = DevServerConfiguration()
        change(&configuration.faults)
        return configuration
    }

    @Test func failRateAnswers500Or503BeforeDoingAnything() async throws {
        try await withDevServer(Self.configuration { $0.failRate = 1 }) { server in
            let client = DevServerClient(server)
            var statuses: Set<Int> = []
            for _ in 0..<12 {
                let response = try await client.post(
                    "/api/sessions", json: Bodies.session(), idempotencyKey: UUID().uuidString)
                statuses.insert(response.status)
                #expect(response.errorCode == "internal")
                if response.status == 503 { #expect(response.headers.first(name: "Retry-After") == "1") }
            }
            #expect(statuses == [500, 503])
            // Not health, not admin, not reads.
            #expect(try await client.get("/api/health").status == 200)
            #expect(try await client.get("/api/sessions?clientId=\(BadRequest.uuid)").status == 200)
            let stats = try await client.stats()
            #expect((stats["faults"] as? [String: Any])?["server_error"] as? Int == 12)
            #expect(try await client.createdCount("session") == 0)
        }
    }

    @Test func rateLimitRateAnswers429WithRetryAfter() async throws {
        try await withDevServer(
            Self.configuration {
                $0.rateLimitRate = 1
                $0.retryAfterSeconds = 2
            }
        ) { server in
            let client = DevServerClient(server)
            let response = try await client.post("/api/sessions", json: Bodies.session())
            #expect(response.status == 429)
            #expect(response.errorCode == "rate_limited")
            #expect(response.headers.first(name: "Retry-After") == "2")
            #expect(try await client.createdCount("session") == 0)
        }
    }

    @Test func dropAfterCommitClosesTheConnectionWithoutAnswerButKeepsRecordAndKey() async throws {
        try await withDevServer(Self.configuration { $0.dropAfterCommitRate = 1 }) { server in
            let client = DevServerClient(server)
            let clientId = UUID().uuidString.lowercased()
            let body = Bodies.session(clientId: clientId)
            // A connection error, not a status line.
            await #expect(throws: (any Error).self) {
                _ = try await client.post("/api/sessions", json: body, idempotencyKey: "dropped")
            }
            let lookup = try await client.get("/api/sessions?clientId=\(clientId)")
            let items = try #require(lookup.json["items"] as? [[String: Any]])
            #expect(items.count == 1)

            #expect(try await client.put("/admin/faults", json: #"{"dropAfterCommitRate":0}"#).status == 200)
            let retry = try await client.post("/api/sessions", json: body, idempotencyKey: "dropped")
            #expect(retry.status == 201)
            #expect(retry.replayed)
            #expect(retry.id == items[0]["id"] as? Int)

            let log = try await client.get("/admin/requests").json["requests"] as? [[String: Any]] ?? []
            let keyed = log.filter { $0["idempotencyKey"] as? String == "dropped" }
            #expect(keyed.map { $0["dropped"] as? Bool } == [true, false])
            #expect(keyed.map { $0["replayed"] as? Bool } == [false, true])
            #expect(try await client.createdCount("session") == 1)
        }
    }

    @Test func theSameSeedGivesTheSameFaults() async throws {
        let configuration = Self.configuration {
            $0.failRate = 0.3
            $0.rateLimitRate = 0.3
            $0.seed = 42
        }
        func statuses() async throws -> [Int] {
            try await withDevServer(configuration) { server in
                let client = DevServerClient(server)
                var statuses: [Int] = []
                for _ in 0..<30 {
                    statuses.append(try await client.post("/api/sessions", json: Bodies.session()).status)
                }
                return statuses
            }
        }
        let first = try await statuses()
        let second = try await statuses()
        #expect(first == second)
        #expect(Set(first).isSuperset(of: [201, 429]))
        #expect(first.contains(500) || first.contains(503))
    }

    @Test func latencyDelaysPosts() async throws {
        try await withDevServer(Self.configuration { $0.latencyMilliseconds = 150...200 }) { server in
            let client = DevServerClient(server)
            let clock = ContinuousClock()
            let start = clock.now
            let response = try await client.post("/api/sessions", json: Bodies.session())
            #expect(response.status == 201)
            #expect(clock.now - start >= .milliseconds(150))
        }
    }

    /// What the latency case of `make bench` reads off the log: the gap between an answer and the
    /// client's next request is the second's arrival less the first's arrival and duration.
    @Test func theRequestLogSaysWhenEachRequestArrivedAndHowLongItTook() async throws {
        try await withDevServer(Self.configuration { $0.latencyMilliseconds = 50...50 }) { server in
            let client = DevServerClient(server)
            let clock = ContinuousClock()
            let sent = clock.now
            _ = try await client.post("/api/sessions", json: Bodies.session())
            let answered = clock.now
            // The client's own time between the two: a request that turns the latency off, so
            // that the second answers at once (an arrival logged at the end would then show).
            #expect(try await client.put("/admin/faults", json: #"{"latencyMs":"0-0"}"#).status == 200)
            let sentAgain = clock.now
            #expect(try await client.post("/api/sessions", json: Bodies.session()).status == 201)
            let clientSpan = clock.now - sent

            let log = try await client.get("/admin/requests").json["requests"] as? [[String: Any]] ?? []
            let posts = log.filter { $0["path"] as? String == "/api/sessions" }
            try #require(posts.count == 2)
            let arrived = posts.map { $0["receivedMs"] as? Double ?? -1 }
            let took = posts.map { $0["durationMs"] as? Double ?? -1 }
            #expect(took[0] >= 50)
            // The server answered the first before the client read it, and the second arrived
            // after the client sent it: the logged gap holds at least the client's own time.
            let gap = arrived[1] - (arrived[0] + took[0])
            #expect(gap >= (sentAgain - answered) / .milliseconds(1))
            // And both requests, from the first's arrival to the second's answer, lie within what
            // the client saw from sending the first to reading the second's answer.
            #expect(arrived[1] + took[1] - arrived[0] <= clientSpan / .milliseconds(1))
        }
    }

    @Test func faultsCanBeChangedWhileRunning() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let changed = try await client.put("/admin/faults", json: #"{"failRate":1,"latencyMs":"0-5","seed":7}"#)
            #expect(changed.json["failRate"] as? Double == 1)
            #expect(changed.json["latencyMs"] as? String == "0-5")
            #expect(try await client.post("/api/sessions", json: Bodies.session()).errorCode == "internal")
            #expect(try await client.put("/admin/faults", json: #"{"failRate":2}"#).status == 422)
        }
    }
}

@Suite struct PersistenceTests {
    @Test func dataSurvivesARestartOnTheSameDatabase() async throws {
        try await withTemporaryDirectory { directory in
            var configuration = DevServerConfiguration()
            configuration.databasePath = directory.appendingPathComponent("devserver.sqlite").path
            let clientId = UUID().uuidString.lowercased()
            let (sessionId, treeBefore) = try await withDevServer(configuration) { server in
                let client = DevServerClient(server)
                let session = try #require(
                    try await client.post("/api/sessions", json: Bodies.session(clientId: clientId)).id)
                _ = try await client.post("/api/sessions/\(session)/dope", json: Bodies.dope())
                let group = try #require(
                    try await client.post("/api/sessions/\(session)/groups", json: Bodies.group()).id)
                _ = try await client.postImage(group: group, clientId: UUID().uuidString, bytes: SampleImages.webp)
                return (session, try await client.get("/api/sessions/\(session)").body)
            }
            try await withDevServer(configuration) { server in
                let client = DevServerClient(server)
                #expect(try await client.get("/api/sessions/\(sessionId)").body == treeBefore)
                let items = try await client.get("/api/sessions?clientId=\(clientId)").json["items"] as? [[String: Any]]
                #expect(items?.count == 1)
                // New ids continue after the old ones.
                #expect(try #require(try await client.post("/api/sessions", json: Bodies.session()).id) > sessionId)
            }
        }
    }

    @Test func anUnopenableDatabaseMakesStartingFail() async throws {
        var configuration = DevServerConfiguration()
        configuration.databasePath = "/nonexistent-folder-\(UUID().uuidString)/db.sqlite"
        await #expect(throws: (any Error).self) {
            try await withDevServer(configuration) { _ in }
        }
    }
}
