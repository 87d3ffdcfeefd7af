import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import NIOHTTP1
import Testing

/// `--no-lookups`: the two GETs answer as on a server without them; everything else works.
@Suite struct NoLookupsTests {
    @Test(arguments: MissingLookupsStatus.allCases)
    func bothLookupsAreRefusedWhilePostsAndAdminRoutesWork(_ status: MissingLookupsStatus) async throws {
        var configuration = DevServerConfiguration()
        configuration.lookups = false
        configuration.lookupsStatus = status
        try await withDevServer(configuration) { server in
            let client = DevServerClient(server)
            let clientId = UUID().uuidString.lowercased()
            let session = try await client.post(
                "/api/sessions", json: Bodies.session(clientId: clientId), idempotencyKey: "s")
            #expect(session.status == 201)
            let sessionId = try #require(session.id)
            #expect(try await client.post("/api/sessions/\(sessionId)/dope", json: Bodies.dope()).status == 201)
            // Keys are still honoured: only the lookups are gone.
            #expect(
                try await client.post("/api/sessions", json: Bodies.session(clientId: clientId), idempotencyKey: "s")
                    .replayed)

            let lookups = [
                (path: "/api/sessions?clientId=\(clientId)", allow: "POST"),
                (path: "/api/sessions/\(sessionId)", allow: ""),
                (path: "/api/sessions/999999", allow: ""),
            ]
            for (path, allow) in lookups {
                let response = try await client.get(path)
                #expect(response.status == status.rawValue, "\(path)")
                #expect(response.errorCode == (status == .notFound ? "not_found" : "method_not_allowed"), "\(path)")
                #expect(response.headers.first(name: "Allow") == (status == .notFound ? nil : allow), "\(path)")
            }
            // Other methods on those paths: as if the GET routes did not exist.
            let delete = try await client.send(.DELETE, "/api/sessions")
            #expect(delete.status == 405)
            #expect(delete.headers.first(name: "Allow") == "POST")
            #expect(try await client.send(.DELETE, "/api/sessions/\(sessionId)").status == 404)

            // The admin routes count and show everything.
            #expect(try await client.createdCount("session") == 1)
            #expect(try await client.createdCount("dope") == 1)
            let items = try await client.get("/admin/sessions?clientId=\(clientId)").json["items"] as? [[String: Any]]
            #expect(items?.map { $0["id"] as? Int } == [sessionId])
            let tree = try await client.get("/admin/sessions/\(sessionId)")
            #expect(tree.status == 200)
            #expect((tree.json["dope"] as? [Any])?.count == 1)
            let log = try await client.get("/admin/requests").json["requests"] as? [[String: Any]] ?? []
            let refused = log.filter { $0["method"] as? String == "GET" && $0["status"] as? Int == status.rawValue }
            #expect(refused.count == lookups.count)
        }
    }

    @Test func theAdminLookupsAnswerAsTheAPIOnes() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let clientId = UUID().uuidString.lowercased()
            let sessionId = try #require(
                try await client.post("/api/sessions", json: Bodies.session(clientId: clientId)).id)
            #expect(try await client.post("/api/sessions/\(sessionId)/chrono", json: Bodies.chrono()).status == 201)
            for path in [
                "/sessions?clientId=\(clientId)", "/sessions/\(sessionId)", "/sessions/999999", "/sessions?clientId=x",
            ] {
                let api = try await client.get("/api" + path)
                let admin = try await client.get("/admin" + path)
                #expect(admin.status == api.status, "\(path)")
                #expect(admin.body == api.body, "\(path)")
            }
        }
    }
}
