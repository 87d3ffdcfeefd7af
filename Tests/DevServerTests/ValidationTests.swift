import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

/// One request that must be refused, and how.
struct BadRequest: CustomTestStringConvertible, Sendable {
    let name: String
    /// `sessions`, `dope`, `chrono`, `readings`, `groups` or `measurement`.
    let route: String
    let body: String
    let code: String
    let field: String?

    var testDescription: String { name }

    static let uuid = "6f1c2a4e-1b2c-4d5e-8f90-123456789abc"

    static func session(_ name: String, _ fields: String, code: String = "validation_failed", field: String?)
        -> BadRequest
    {
        BadRequest(name: name, route: "sessions", body: "{\(fields)}", code: code, field: field)
    }
    static let sessionBase = #""clientId":"\#(uuid)","sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":1"#
}

@Suite struct ValidationTests {
    static let badRequests: [BadRequest] = [
        .session("missing clientId", #""sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":1"#, field: "clientId"),
        .session(
            "clientId not a UUID", #""clientId":"abc","sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":1"#,
            field: "clientId"),
        .session(
            "clientId a number", #""clientId":5,"sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":1"#,
            field: "clientId"),
        .session("missing sessionDate", #""clientId":"\#(BadRequest.uuid)","rifleSetupId":1"#, field: "sessionDate"),
        .session(
            "sessionDate not a date-time",
            #""clientId":"\#(BadRequest.uuid)","sessionDate":"2024-05-01","rifleSetupId":1"#, field: "sessionDate"),
        .session(
            "sessionDate month 13",
            #""clientId":"\#(BadRequest.uuid)","sessionDate":"2024-13-01T10:00:00Z","rifleSetupId":1"#,
            field: "sessionDate"),
        .session(
            "missing rifleSetupId", #""clientId":"\#(BadRequest.uuid)","sessionDate":"2024-05-01T10:00:00Z""#,
            field: "rifleSetupId"),
        .session(
            "rifleSetupId a string",
            #""clientId":"\#(BadRequest.uuid)","sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":"1""#,
            field: "rifleSetupId"),
        .session(
            "rifleSetupId 0",
            #""clientId":"\#(BadRequest.uuid)","sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":0"#,
            field: "rifleSetupId"),
        .session(
            "rifleSetupId a fraction",
            #""clientId":"\#(BadRequest.uuid)","sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":1.5"#,
            field: "rifleSetupId"),
        .session("null for an optional field", BadRequest.sessionBase + #","notes":null"#, field: "notes"),
        .session(
            "notes too long", BadRequest.sessionBase + #","notes":"\#(String(repeating: "a", count: 10_001))""#,
            field: "notes"),
        .session("humidity above 100", BadRequest.sessionBase + #","humidity":100.5"#, field: "humidity"),
        .session("humidity a boolean", BadRequest.sessionBase + #","humidity":true"#, field: "humidity"),
        .session("windDirection below 0", BadRequest.sessionBase + #","windDirection":-1"#, field: "windDirection"),
        .session(
            "unknown rifle setup",
            #""clientId":"\#(BadRequest.uuid)","sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":101"#,
            code: "unknown_reference", field: "rifleSetupId"),
        .session(
            "unknown location", BadRequest.sessionBase + #","locationId":51"#, code: "unknown_reference",
            field: "locationId"),
        BadRequest(name: "not JSON", route: "sessions", body: "{nope", code: "validation_failed", field: "body"),
        BadRequest(name: "an array body", route: "sessions", body: "[]", code: "validation_failed", field: "body"),
        BadRequest(
            name: "dope distance 0", route: "dope", body: #"{"clientId":"\#(BadRequest.uuid)","distance":0}"#,
            code: "validation_failed", field: "distance"),
        BadRequest(
            name: "dope unknown ammunition", route: "dope",
            body: #"{"clientId":"\#(BadRequest.uuid)","distance":100,"ammunitionId":501}"#, code: "unknown_reference",
            field: "ammunitionId"),
        BadRequest(
            name: "chrono unknown ammo lot", route: "chrono",
            body: #"{"clientId":"\#(BadRequest.uuid)","ammoLotId":9999}"#, code: "unknown_reference", field: "ammoLotId"
        ),
        BadRequest(
            name: "chrono negative distance", route: "chrono",
            body: #"{"clientId":"\#(BadRequest.uuid)","distanceToChronograph":-1}"#, code: "validation_failed",
            field: "distanceToChronograph"),
        BadRequest(
            name: "reading without isExcluded", route: "readings",
            body: #"{"clientId":"\#(BadRequest.uuid)","shotNumber":1,"velocity":2800}"#, code: "validation_failed",
            field: "isExcluded"),
        BadRequest(
            name: "reading velocity 0", route: "readings",
            body: #"{"clientId":"\#(BadRequest.uuid)","shotNumber":1,"velocity":0,"isExcluded":false}"#,
            code: "validation_failed", field: "velocity"),
        BadRequest(
            name: "group without numberOfShots", route: "groups",
            body: #"{"clientId":"\#(BadRequest.uuid)","groupNumber":1,"distance":100}"#, code: "validation_failed",
            field: "numberOfShots"),
        BadRequest(
            name: "group negative size", route: "groups",
            body:
                #"{"clientId":"\#(BadRequest.uuid)","groupNumber":1,"distance":100,"numberOfShots":5,"groupSizeMoa":-0.1}"#,
            code: "validation_failed", field: "groupSizeMoa"),
        BadRequest(
            name: "measurement bulletDiameter 0", route: "measurement",
            body:
                #"{"clientId":"\#(BadRequest.uuid)","holePositions":[],"bulletDiameter":0,"calibrationMethod":"grid"}"#,
            code: "validation_failed", field: "bulletDiameter"),
        BadRequest(
            name: "measurement hole without y", route: "measurement",
            body:
                #"{"clientId":"\#(BadRequest.uuid)","holePositions":[{"x":1,"y":1},{"x":2}],"bulletDiameter":0.3,"calibrationMethod":"grid"}"#,
            code: "validation_failed", field: "holePositions[1].y"),
        BadRequest(
            name: "measurement confidence above 1", route: "measurement",
            body:
                #"{"clientId":"\#(BadRequest.uuid)","holePositions":[],"bulletDiameter":0.3,"calibrationMethod":"grid","measurementConfidence":1.5}"#,
            code: "validation_failed", field: "measurementConfidence"),
    ]

    @Test(arguments: badRequests)
    func isRefusedNamingTheField(_ bad: BadRequest) async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let path = try await Self.path(for: bad.route, client: client)
            let response = try await client.post(path, json: bad.body)
            #expect(response.status == 422)
            #expect(response.errorCode == bad.code)
            #expect(response.errorField == bad.field)
            #expect((response.json["error"] as? [String: Any])?["message"] is String)
            let kinds = ["sessions": "session", "readings": "reading", "groups": "group"]
            #expect(try await client.createdCount(kinds[bad.route] ?? bad.route) == 0)
        }
    }

    /// A path of `route` whose parents exist.
    static func path(for route: String, client: DevServerClient) async throws -> String {
        if route == "sessions" { return "/api/sessions" }
        let session = try #require(try await client.post("/api/sessions", json: Bodies.session()).id)
        switch route {
        case "readings":
            let chrono = try #require(
                try await client.post("/api/sessions/\(session)/chrono", json: Bodies.chrono()).id)
            return "/api/sessions/\(session)/chrono/\(chrono)/readings"
        case "measurement":
            let group = try #require(try await client.post("/api/sessions/\(session)/groups", json: Bodies.group()).id)
            return "/api/groups/\(group)/measurement"
        default:
            return "/api/sessions/\(session)/\(route)"
        }
    }

    @Test func unknownKeysAreIgnored() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let response = try await client.post(
                "/api/sessions", json: Bodies.session(extra: #","somethingNew":{"a":[1,2]}"#))
            #expect(response.status == 201)
            let tree = try await client.get("/api/sessions/\(try #require(response.id))")
            #expect(tree.json["somethingNew"] == nil)
        }
    }

    @Test func referencesCanBeAddedAndReplacedWhileRunning() async throws {
        var configuration = DevServerConfiguration()
        configuration.references.ammunition = IDSet(1...5)
        try await withDevServer(configuration) { server in
            let client = DevServerClient(server)
            let session = try #require(try await client.post("/api/sessions", json: Bodies.session()).id)
            let body = #"{"clientId":"\#(BadRequest.uuid)","distance":100,"ammunitionId":42}"#
            let before = try await client.post("/api/sessions/\(session)/dope", json: body)
            #expect(before.errorCode == "unknown_reference")

            let added = try await client.post(
                "/admin/references", json: #"{"ammunition":[42,"100-200"],"rifles":"300"}"#)
            #expect(added.status == 200)
            #expect(added.json["ammunition"] as? String == "1-5,42,100-200")
            #expect(try await client.post("/api/sessions/\(session)/dope", json: body).status == 201)

            let replaced = try await client.put("/admin/references", json: #"{"ammunition":[7]}"#)
            #expect(replaced.json["ammunition"] as? String == "7")
            #expect(try await client.post("/api/sessions/\(session)/dope", json: body).errorCode == "unknown_reference")
            #expect(try await client.get("/admin/references").json["rifles"] as? String == "1-100,300")

            let invalid = try await client.post("/admin/references", json: #"{"ammunition":[0]}"#)
            #expect(invalid.status == 422)
        }
    }
}
