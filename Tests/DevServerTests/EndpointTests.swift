import Crypto
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import NIOCore
import NIOHTTP1
import Testing

/// Integration: every endpoint of docs/api.yaml against a real server on port 0.
@Suite struct EndpointTests {
    @Test func healthNeedsNoToken() async throws {
        try await withDevServer { server in
            var client = DevServerClient(server)
            client.authorization = nil
            let response = try await client.get("/api/health")
            #expect(response.status == 200)
        }
    }

    @Test func aWholeSessionTreeComesBackInCreationOrderWithEveryField() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let sessionClientId = UUID().uuidString.lowercased()
            let sessionBody = Bodies.session(clientId: sessionClientId)
            let session = try await client.post("/api/sessions", json: sessionBody)
            #expect(session.status == 201)
            #expect(session.json["clientId"] as? String == sessionClientId)
            let sessionId = try #require(session.id)

            let dopeBodies = [Bodies.dope(distance: 100), Bodies.dope(distance: 200)]
            for body in dopeBodies {
                #expect(try await client.post("/api/sessions/\(sessionId)/dope", json: body).status == 201)
            }
            let chrono = try await client.post("/api/sessions/\(sessionId)/chrono", json: Bodies.chrono())
            let chronoId = try #require(chrono.id)
            let readingBodies = [Bodies.reading(shot: 1), Bodies.reading(shot: 2)]
            for body in readingBodies {
                #expect(
                    try await client.post("/api/sessions/\(sessionId)/chrono/\(chronoId)/readings", json: body).status
                        == 201)
            }
            let groupClientId = UUID().uuidString
            let group = try await client.post(
                "/api/sessions/\(sessionId)/groups",
                json: #"{"clientId":"\#(groupClientId)","groupNumber":1,"distance":100,"numberOfShots":5}"#)
            let groupId = try #require(group.id)
            let measurementBody = Bodies.measurement(clientId: groupClientId)
            #expect(try await client.post("/api/groups/\(groupId)/measurement", json: measurementBody).status == 201)
            let photo = try await client.postImage(
                group: groupId, clientId: groupClientId, fileName: "p1.jpg", bytes: SampleImages.jpeg)
            #expect(photo.status == 201)
            let original = try await client.postImage(
                group: groupId, clientId: groupClientId, role: "original", fileName: "o.png", bytes: SampleImages.png)
            #expect(original.status == 201)

            let tree = try await client.get("/api/sessions/\(sessionId)")
            #expect(tree.status == 200)
            let json = tree.json
            #expect(json["id"] as? Int == sessionId)
            #expect(json["clientId"] as? String == sessionClientId)
            // Every stored field comes back as sent.
            let sent = try JSONSerialization.jsonObject(with: Data(sessionBody.utf8)) as! [String: Any]
            for (key, value) in sent {
                #expect("\(json[key] ?? "missing")" == "\(value)", "session.\(key)")
            }
            let dope = try #require(json["dope"] as? [[String: Any]])
            #expect(dope.map { $0["distance"] as? Int } == [100, 200])
            #expect(dope[0]["elevationMoa"] as? Double == 1.25)
            let chronos = try #require(json["chrono"] as? [[String: Any]])
            #expect(chronos.count == 1)
            #expect(chronos[0]["chronographModel"] as? String == "Garmin Xero C1")
            let readings = try #require(chronos[0]["readings"] as? [[String: Any]])
            #expect(readings.map { $0["shotNumber"] as? Int } == [1, 2])
            #expect(readings[0]["isExcluded"] as? Bool == false)
            let groups = try #require(json["groups"] as? [[String: Any]])
            #expect(groups.count == 1)
            #expect(groups[0]["clientId"] as? String == groupClientId)
            let measurement = try #require(groups[0]["measurement"] as? [String: Any])
            #expect(measurement["bulletDiameter"] as? Double == 0.308)
            #expect((measurement["holePositions"] as? [[String: Any]])?.count == 2)
            let images = try #require(groups[0]["images"] as? [[String: Any]])
            #expect(images.map { $0["role"] as? String } == ["photo", "original"])
            #expect(images.map { $0["contentType"] as? String } == ["image/jpeg", "image/png"])
            #expect(images[0]["fileName"] as? String == "p1.jpg")
            #expect(images[0]["size"] as? Int == SampleImages.jpeg.count)
            #expect(
                images[0]["sha256"] as? String
                    == SHA256.hash(data: SampleImages.jpeg).map { String(format: "%02x", $0) }.joined())
        }
    }

    @Test func recordsAreNeverDeduplicatedByClientId() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let clientId = UUID().uuidString.lowercased()
            let first = try await client.post("/api/sessions", json: Bodies.session(clientId: clientId))
            let second = try await client.post(
                "/api/sessions", json: Bodies.session(clientId: clientId), idempotencyKey: "k-1")
            let third = try await client.post(
                "/api/sessions", json: Bodies.session(clientId: clientId), idempotencyKey: "k-2")
            #expect([first.status, second.status, third.status] == [201, 201, 201] as [Int])
            let lookup = try await client.get("/api/sessions?clientId=\(clientId)")
            #expect(lookup.status == 200)
            let items = try #require(lookup.json["items"] as? [[String: Any]])
            #expect(items.compactMap { $0["id"] as? Int } == [first.id, second.id, third.id].compactMap { $0 })
            #expect(items.allSatisfy { $0["clientId"] as? String == clientId })

            // Duplicates show in the tree too.
            let sessionId = try #require(first.id)
            let dope = Bodies.dope()
            #expect(try await client.post("/api/sessions/\(sessionId)/dope", json: dope).status == 201)
            #expect(try await client.post("/api/sessions/\(sessionId)/dope", json: dope).status == 201)
            let tree = try await client.get("/api/sessions/\(sessionId)")
            #expect((tree.json["dope"] as? [Any])?.count == 2)

            let none = try await client.get("/api/sessions?clientId=\(UUID().uuidString)")
            #expect((none.json["items"] as? [Any])?.isEmpty == true)
        }
    }

    @Test func lookupNeedsAValidClientId() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let missing = try await client.get("/api/sessions")
            #expect(missing.status == 422)
            #expect(missing.errorField == "clientId")
            let malformed = try await client.get("/api/sessions?clientId=nope")
            #expect(malformed.status == 422)
            #expect(malformed.errorCode == "validation_failed")
        }
    }

    @Test func aMissingParentIs404() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let session = try #require(try await client.post("/api/sessions", json: Bodies.session()).id)
            let otherSession = try #require(try await client.post("/api/sessions", json: Bodies.session()).id)
            let chrono = try #require(
                try await client.post("/api/sessions/\(session)/chrono", json: Bodies.chrono()).id)

            let cases: [(String, String)] = [
                ("/api/sessions/999999/dope", Bodies.dope()),
                ("/api/sessions/999999/chrono", Bodies.chrono()),
                ("/api/sessions/999999/groups", Bodies.group()),
                ("/api/sessions/\(session)/chrono/999999/readings", Bodies.reading(shot: 1)),
                // A chrono session of another session is not this session's.
                ("/api/sessions/\(otherSession)/chrono/\(chrono)/readings", Bodies.reading(shot: 1)),
                // A session id is not a group id.
                ("/api/groups/\(session)/measurement", Bodies.measurement()),
                ("/api/groups/999999/measurement", Bodies.measurement()),
                ("/api/sessions/abc/dope", Bodies.dope()),
            ]
            for (path, body) in cases {
                let response = try await client.post(path, json: body)
                #expect(response.status == 404, "\(path)")
                #expect(response.errorCode == "not_found", "\(path)")
            }
            let image = try await client.postImage(
                group: 999_999, clientId: UUID().uuidString, bytes: SampleImages.jpeg)
            #expect(image.status == 404)
            let tree = try await client.get("/api/sessions/999999")
            #expect(tree.status == 404)
            #expect(tree.errorCode == "not_found")
            #expect(try await client.get("/api/sessions/\(chrono)").status == 404)
        }
    }

    /// The dev server serves every path of docs/api.yaml with exactly its methods: asked with a
    /// method the API has nowhere (DELETE), each path answers 405 with the yaml's methods in
    /// `Allow`. Read from the shipped description, so a path or method it gains that the server
    /// lacks fails here. (The other way, a route the description lacks, is
    /// ``aMethodThatAPathDoesNotTakeIs405WithAllow()``'s list.)
    @Test func everyPathOfTheAPIDescriptionIsServedWithItsMethods() async throws {
        let description = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .appendingPathComponent("../../docs/api.yaml").standardizedFileURL, encoding: .utf8)
        var methods: [(path: String, methods: [String])] = []
        var inPaths = false
        for line in description.split(separator: "\n", omittingEmptySubsequences: false) {
            // A top-level key ends `paths:` (a blank line does not).
            if !line.isEmpty, !line.hasPrefix(" ") { inPaths = line == "paths:" }
            guard inPaths else { continue }
            if line.hasPrefix("  /"), line.hasSuffix(":"), !line.hasPrefix("   ") {
                methods.append((String(line.dropFirst(2).dropLast()), []))
            } else if let verb = ["get", "post", "put", "patch", "delete"].first(where: { line == "    \($0):" }) {
                methods[methods.count - 1].methods.append(verb.uppercased())
            }
        }
        #expect(methods.count >= 12, "paths read from docs/api.yaml: \(methods.map(\.path))")
        try await withDevServer { server in
            let client = DevServerClient(server)
            for (template, verbs) in methods {
                // Every path parameter as an id that exists nowhere: the route, not the record, answers.
                let path = template.replacing(/\{[A-Za-z]+\}/, with: "1")
                let response = try await client.send(.DELETE, path)
                #expect(response.status == 405, "DELETE \(path)")
                #expect(response.headers.first(name: "Allow") == verbs.sorted().joined(separator: ", "), "\(template)")
            }
        }
    }

    /// HEAD is not in docs/api.yaml, so it is a method like any other: 405 on a path that exists.
    @Test func aMethodThatAPathDoesNotTakeIs405WithAllow() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let cases: [(method: String, path: String, allow: String)] = [
                ("DELETE", "/api/sessions", "GET, POST"),
                ("PUT", "/api/sessions?clientId=x", "GET, POST"),
                ("PATCH", "/api/sessions/1", "GET"),
                ("POST", "/api/sessions/1", "GET"),
                ("DELETE", "/api/sessions/abc", "GET"),
                ("GET", "/api/sessions/1/dope", "POST"),
                ("OPTIONS", "/api/sessions/1/chrono", "POST"),
                ("GET", "/api/sessions/1/chrono/2/readings", "POST"),
                ("PUT", "/api/groups/1/measurement", "POST"),
                ("GET", "/api/groups/1/images", "POST"),
                ("POST", "/api/health", "GET"),
                ("DELETE", "/admin/references", "GET, POST, PUT"),
                ("GET", "/admin/reset", "POST"),
            ]
            for (method, path, allow) in cases {
                let response = try await client.send(HTTPMethod(rawValue: method), path)
                #expect(response.status == 405, "\(method) \(path)")
                #expect(response.headers.first(name: "Allow") == allow, "\(method) \(path)")
                #expect(response.errorCode == "method_not_allowed", "\(method) \(path)")
            }
            let head = try await client.send(.HEAD, "/api/sessions/1")
            #expect(head.status == 405)
            #expect(head.headers.first(name: "Allow") == "GET")
            #expect(head.body.isEmpty)
            // The credential is checked first, as for every route.
            var anonymous = client
            anonymous.authorization = nil
            #expect(try await anonymous.send(.DELETE, "/api/sessions").status == 401)
            #expect(try await client.stats()["byStatus"] as? [String: Int] == ["405": cases.count + 1, "401": 1])
        }
    }

    @Test func anUnknownPathIsStill404() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let cases: [(method: HTTPMethod, path: String)] = [
                (.GET, "/"), (.POST, "/api"), (.GET, "/api/session"), (.DELETE, "/api/sessions/1/notes"),
                (.POST, "/api/sessions/1/chrono/2"), (.GET, "/api/groups/1"), (.PUT, "/admin/nothing"),
            ]
            for (method, path) in cases {
                let response = try await client.send(method, path)
                #expect(response.status == 404, "\(method) \(path)")
                #expect(response.headers.first(name: "Allow") == nil, "\(method) \(path)")
                #expect(response.errorCode == "not_found", "\(method) \(path)")
            }
        }
    }

    @Test func jsonBodiesAreBoundedAndTyped() async throws {
        var configuration = DevServerConfiguration()
        configuration.maxJSONBytes = 2048
        try await withDevServer(configuration) { server in
            let client = DevServerClient(server)
            let big = Bodies.session(extra: #","padding":"\#(String(repeating: "x", count: 4096))""#)
            let tooLarge = try await client.post("/api/sessions", json: big)
            #expect(tooLarge.status == 413)
            #expect(tooLarge.errorCode == "payload_too_large")

            let wrongType = try await client.send(
                .POST, "/api/sessions", body: .init(string: Bodies.session()), contentType: "text/plain")
            #expect(wrongType.status == 415)
            #expect(wrongType.errorCode == "unsupported_media_type")
        }
    }
}
