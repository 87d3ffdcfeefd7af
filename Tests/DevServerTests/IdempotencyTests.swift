import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@Suite struct IdempotencyTests {
    @Test func theSameRequestWithTheSameKeyIsReplayedNotCreatedTwice() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let body = Bodies.session()
            let first = try await client.post("/api/sessions", json: body, idempotencyKey: "session-1")
            let second = try await client.post("/api/sessions", json: body, idempotencyKey: "session-1")
            #expect(first.status == 201)
            #expect(!first.replayed)
            #expect(second.status == 201)
            #expect(second.replayed)
            #expect(second.body == first.body)
            #expect(try await client.createdCount("session") == 1)

            // Images are fingerprinted over the exact multipart bytes too.
            let group = try await client.makeGroup()
            let image1 = try await client.postImage(
                group: group.id, clientId: group.clientId, bytes: SampleImages.jpeg, idempotencyKey: "img")
            let image2 = try await client.postImage(
                group: group.id, clientId: group.clientId, bytes: SampleImages.jpeg, idempotencyKey: "img")
            #expect(image2.replayed)
            #expect(image2.id == image1.id)
            #expect(try await client.createdCount("image") == 1)

            let log = try await client.get("/admin/requests").json["requests"] as? [[String: Any]] ?? []
            let replays = log.filter { $0["replayed"] as? Bool == true }
            #expect(replays.map { $0["idempotencyKey"] as? String } == ["session-1", "img"])
            #expect(try await client.stats()["replays"] as? Int == 2)
        }
    }

    @Test func theSameKeyForADifferentRequestIs422() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let first = try await client.post("/api/sessions", json: Bodies.session(), idempotencyKey: "k")
            #expect(first.status == 201)
            let otherBody = try await client.post("/api/sessions", json: Bodies.session(), idempotencyKey: "k")
            #expect(otherBody.status == 422)
            #expect(otherBody.errorCode == "idempotency_key_reused")
            // Same bytes, another path: another request.
            let session = try #require(first.id)
            let dope = Bodies.dope()
            #expect(
                try await client.post("/api/sessions/\(session)/dope", json: dope, idempotencyKey: "d").status == 201)
            let otherSession = try #require(try await client.post("/api/sessions", json: Bodies.session()).id)
            let otherPath = try await client.post("/api/sessions/\(otherSession)/dope", json: dope, idempotencyKey: "d")
            #expect(otherPath.errorCode == "idempotency_key_reused")
            #expect(try await client.createdCount("session") == 2)
            #expect(try await client.createdCount("dope") == 1)
        }
    }

    @Test func anErrorIsNotKeptSoTheKeyWorksLater() async throws {
        var configuration = DevServerConfiguration()
        configuration.references.rifleSetups = IDSet(1...1)
        try await withDevServer(configuration) { server in
            let client = DevServerClient(server)
            let body = #"{"clientId":"\#(UUID().uuidString)","sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":7}"#
            let refused = try await client.post("/api/sessions", json: body, idempotencyKey: "later")
            #expect(refused.errorCode == "unknown_reference")
            #expect(try await client.post("/admin/references", json: #"{"rifles":[7]}"#).status == 200)
            let accepted = try await client.post("/api/sessions", json: body, idempotencyKey: "later")
            #expect(accepted.status == 201)
            #expect(!accepted.replayed)
        }
    }

    @Test func aConcurrentTwinGets409WhileTheFirstIsInFlight() async throws {
        var configuration = DevServerConfiguration()
        // Every POST holds its key for 10 s, and the twin is sent once the first has reached the
        // server: whichever claims the key first, the other arrives while it holds it, however
        // long the suite's load delays either (seconds, seen).
        configuration.faults.latencyMilliseconds = 10_000...10_000
        let (arrivals, arrived) = AsyncStream.makeStream(of: Void.self)
        configuration.onRequest = { method, path in
            if method == "POST" && path == "/api/sessions" { arrived.yield() }
        }
        try await withDevServer(configuration) { server in
            let client = DevServerClient(server)
            let body = Bodies.session()
            async let first = client.post("/api/sessions", json: body, idempotencyKey: "twin")
            var arrival = arrivals.makeAsyncIterator()
            _ = await arrival.next()
            async let second = client.post("/api/sessions", json: body, idempotencyKey: "twin")
            let responses = try await [first, second]
            #expect(responses.map(\.status).sorted() == [201, 409])
            #expect(responses.first { $0.status == 409 }?.errorCode == "idempotency_key_in_use")
            #expect(try await client.createdCount("session") == 1)
            // Once the first is answered, the key replays.
            let again = try await client.post("/api/sessions", json: body, idempotencyKey: "twin")
            #expect(again.replayed)
        }
    }

    @Test func keysAreKeptPerCredentialAndSurviveARestart() async throws {
        try await withTemporaryDirectory { directory in
            var configuration = DevServerConfiguration()
            configuration.databasePath = directory.appendingPathComponent("devserver.sqlite").path
            let body = Bodies.session()
            let firstId = try await withDevServer(configuration) { server in
                try #require(
                    try await DevServerClient(server).post("/api/sessions", json: body, idempotencyKey: "persist").id)
            }
            try await withDevServer(configuration) { server in
                let replay = try await DevServerClient(server).post(
                    "/api/sessions", json: body, idempotencyKey: "persist")
                #expect(replay.replayed)
                #expect(replay.id == firstId)
            }
            configuration.token = "another-token"
            try await withDevServer(configuration) { server in
                let fresh = try await DevServerClient(server).post(
                    "/api/sessions", json: body, idempotencyKey: "persist")
                #expect(fresh.status == 201)
                #expect(!fresh.replayed)
                #expect(fresh.id != firstId)
            }
        }
    }

    @Test(arguments: [false, true])
    func aResendWithTheSameKeyCreatesASecondRecordOnlyWhenKeysAreIgnored(_ ignoring: Bool) async throws {
        var configuration = DevServerConfiguration()
        configuration.ignoreIdempotencyKeys = ignoring
        try await withDevServer(configuration) { server in
            let client = DevServerClient(server)
            let body = Bodies.session()
            let first = try await client.post("/api/sessions", json: body, idempotencyKey: "resend")
            let second = try await client.post("/api/sessions", json: body, idempotencyKey: "resend")
            #expect(first.status == 201)
            #expect(second.status == 201)
            #expect(second.replayed == !ignoring)
            #expect((second.id == first.id) == !ignoring)
            #expect(try await client.createdCount("session") == (ignoring ? 2 : 1))

            let group = try await client.makeGroup()
            for _ in 0..<2 {
                let image = try await client.postImage(
                    group: group.id, clientId: group.clientId, bytes: SampleImages.jpeg, idempotencyKey: "image")
                #expect(image.status == 201)
            }
            #expect(try await client.createdCount("image") == (ignoring ? 2 : 1))
            #expect(try await client.stats()["replays"] as? Int == (ignoring ? 0 : 2))
            // The request log shows the key either way.
            let log = try await client.get("/admin/requests").json["requests"] as? [[String: Any]] ?? []
            #expect(log.prefix(2).map { $0["idempotencyKey"] as? String } == ["resend", "resend"])
        }
    }

    @Test func ignoredKeysAreNeverRefusedOrHeld() async throws {
        var configuration = DevServerConfiguration()
        configuration.ignoreIdempotencyKeys = true
        // Each POST lasts 300 ms, so the twin below arrives while the first is being processed.
        configuration.faults.latencyMilliseconds = 300...300
        try await withDevServer(configuration) { server in
            let client = DevServerClient(server)
            let body = Bodies.session()
            async let first = client.post("/api/sessions", json: body, idempotencyKey: "twin")
            async let second = client.post("/api/sessions", json: body, idempotencyKey: "twin")
            let twins = try await [first, second]
            #expect(twins.map(\.status) == [201, 201])
            #expect(Set(twins.compactMap(\.id)).count == 2)
            // Honoured, these would be 422 idempotency_key_reused and 422 validation_failed.
            let reused = try await client.post("/api/sessions", json: Bodies.session(), idempotencyKey: "twin")
            #expect(reused.status == 201)
            let overlong = try await client.post(
                "/api/sessions", json: Bodies.session(), idempotencyKey: String(repeating: "k", count: 256))
            #expect(overlong.status == 201)
            #expect(try await client.createdCount("session") == 4)
        }
    }

    @Test func anOverlongKeyIsRefused() async throws {
        try await withDevServer { server in
            let response = try await DevServerClient(server).post(
                "/api/sessions", json: Bodies.session(), idempotencyKey: String(repeating: "k", count: 256))
            #expect(response.status == 422)
            #expect(response.errorField == "Idempotency-Key")
        }
    }
}
