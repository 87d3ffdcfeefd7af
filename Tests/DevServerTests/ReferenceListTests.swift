import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import NIOHTTP1
import Testing

/// `GET /api/rifles`, `/api/ammunition`, `/api/locations`: docs/api.yaml's reference lists, from the
/// server's reference tables, with ETags, 304s and their reads counted in `/admin/stats`.
@Suite struct ReferenceListTests {
    static func ids(_ response: APIResponse) -> [Int] {
        ((response.json["items"] as? [[String: Any]]) ?? []).compactMap { $0["id"] as? Int }
    }

    @Test("each list holds the configured ids; ammunition carries every ammo lot, spread over its items")
    func listsFollowTheReferenceTables() async throws {
        var configuration = DevServerConfiguration()
        configuration.references.rifleSetups = IDSet(1...3)
        configuration.references.locations = IDSet(5...5)
        configuration.references.ammunition = IDSet(10...11)
        configuration.references.ammoLots = IDSet(1...5)
        try await withDevServer(configuration) { server in
            let client = DevServerClient(server)
            #expect(Self.ids(try await client.get("/api/rifles")) == [1, 2, 3])
            #expect(Self.ids(try await client.get("/api/locations")) == [5])
            let ammunition = try await client.get("/api/ammunition")
            #expect(Self.ids(ammunition) == [10, 11])
            let lots = (ammunition.json["items"] as! [[String: Any]]).map { $0["lots"] as! [Int] }
            #expect(lots == [[1, 3, 5], [2, 4]])
        }
    }

    @Test("the ETag turns a repeated read into a 304 until the table changes; reads are counted by status")
    func etagAndNotModified() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let first = try await client.get("/api/ammunition")
            let tag = try #require(first.headers.first(name: "ETag"))
            let again = try await client.get("/api/ammunition", headers: [("If-None-Match", tag)])
            #expect(again.status == 304 && again.body.isEmpty)
            #expect(again.headers.first(name: "ETag") == tag)
            #expect(
                try await client.get("/api/ammunition", headers: [("If-None-Match", "W/\(tag), \"x\"")]).status == 304)

            try await server.postJSON("/admin/references", ["ammunition": [9999]])
            let changed = try await client.get("/api/ammunition", headers: [("If-None-Match", tag)])
            #expect(changed.status == 200 && Self.ids(changed).last == 9999)
            #expect(changed.headers.first(name: "ETag") != tag)
            #expect(try await server.referenceListReads()["ammunition"] == ["200": 2, "304": 2])
        }
    }

    @Test("--no-reference-lists: the three paths answer 404, as an older API's router would")
    func olderAPIAnswers404() async throws {
        var configuration = DevServerConfiguration()
        configuration.referenceLists = false
        try await withDevServer(configuration) { server in
            let client = DevServerClient(server)
            for path in ["/api/rifles", "/api/ammunition", "/api/locations"] {
                let response = try await client.get(path)
                #expect(response.status == 404 && response.errorCode == "not_found", "\(path)")
            }
        }
    }

    @Test("the lists need the token, as every /api route")
    func listsNeedTheToken() async throws {
        try await withDevServer { server async throws in
            var client = DevServerClient(server)
            client.authorization = nil
            #expect(try await client.get("/api/rifles").status == 401)
        }
    }
}
