import AsyncHTTPClient
import DopeSyncTestSupport
import Foundation
import NIOCore
import NIOHTTP1
import Testing

/// An answer from the dev server, with its body as text and as parsed JSON.
struct APIResponse {
    let status: Int
    let headers: HTTPHeaders
    let body: String

    var json: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:]
    }
    var errorCode: String? { (json["error"] as? [String: Any])?["code"] as? String }
    var errorField: String? { (json["error"] as? [String: Any])?["field"] as? String }
    var id: Int? { json["id"] as? Int }
    var replayed: Bool { headers.first(name: "Idempotent-Replayed") == "true" }
}

/// Talks real HTTP to a running dev server through AsyncHTTPClient.
struct DevServerClient {
    let server: RunningDevServer
    /// `nil` sends no Authorization header.
    var authorization: String?

    init(_ server: RunningDevServer) {
        self.server = server
        self.authorization = server.authorization
    }

    func send(
        _ method: HTTPMethod, _ path: String, body: ByteBuffer? = nil, contentType: String? = "application/json",
        idempotencyKey: String? = nil, headers: [(String, String)] = []
    ) async throws -> APIResponse {
        var request = HTTPClientRequest(url: server.baseURL + path)
        request.method = method
        request.headers.add(contentsOf: headers)
        if let authorization { request.headers.add(name: "Authorization", value: authorization) }
        if let idempotencyKey { request.headers.add(name: "Idempotency-Key", value: idempotencyKey) }
        if let body {
            if let contentType { request.headers.add(name: "Content-Type", value: contentType) }
            request.body = .bytes(body)
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        return APIResponse(status: Int(response.status.code), headers: response.headers, body: String(buffer: bytes))
    }

    func get(_ path: String, headers: [(String, String)] = []) async throws -> APIResponse {
        try await send(.GET, path, headers: headers)
    }

    func post(_ path: String, json: String, idempotencyKey: String? = nil) async throws -> APIResponse {
        try await send(.POST, path, body: ByteBuffer(string: json), idempotencyKey: idempotencyKey)
    }

    func put(_ path: String, json: String) async throws -> APIResponse {
        try await send(.PUT, path, body: ByteBuffer(string: json))
    }

    /// Posts one image as `multipart/form-data` with a fixed boundary (so a retry is byte-identical).
    func postImage(
        group: Int, clientId: String, role: String = "photo", fileName: String = "a.jpg", bytes: [UInt8],
        idempotencyKey: String? = nil, omit: Set<String> = []
    ) async throws -> APIResponse {
        let boundary = "dopesync-test-boundary-7d3f"
        var body = ByteBuffer()
        for (name, value) in [("clientId", clientId), ("role", role), ("fileName", fileName)] where !omit.contains(name)
        {
            body.writeString("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"\r\n\r\n\(value)\r\n")
        }
        if !omit.contains("file") {
            body.writeString(
                "--\(boundary)\r\nContent-Disposition: form-data; name=\"file\"; filename=\"\(fileName)\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            body.writeBytes(bytes)
            body.writeString("\r\n")
        }
        body.writeString("--\(boundary)--\r\n")
        return try await send(
            .POST, "/api/groups/\(group)/images", body: body, contentType: "multipart/form-data; boundary=\(boundary)",
            idempotencyKey: idempotencyKey)
    }

    func stats() async throws -> [String: Any] { try await get("/admin/stats").json }

    func createdCount(_ kind: String) async throws -> Int {
        (try await stats()["created"] as? [String: Any])?[kind] as? Int ?? -1
    }
}

/// Request bodies of every kind, valid unless changed.
enum Bodies {
    static func session(clientId: String = UUID().uuidString.lowercased(), extra: String = "") -> String {
        #"{"clientId":"\#(clientId)","sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":1,"locationId":2,"notes":"calm","temperature":21.5,"humidity":40,"pressure":1013.2,"windSpeed":3,"windDirection":270,"altitude":350\#(extra)}"#
    }
    static func dope(distance: Int = 100) -> String {
        #"{"clientId":"\#(UUID().uuidString)","distance":\#(distance),"elevationMoa":1.25,"elevationMil":0.36,"windageMoa":-0.5,"windageMil":-0.15,"ammunitionId":3,"notes":"ok"}"#
    }
    static func chrono() -> String {
        #"{"clientId":"\#(UUID().uuidString)","ammunitionId":3,"ammoLotId":4,"chronographModel":"Garmin Xero C1","distanceToChronograph":0,"notes":"n"}"#
    }
    static func reading(shot: Int) -> String {
        #"{"clientId":"\#(UUID().uuidString)","shotNumber":\#(shot),"velocity":2800,"isExcluded":false}"#
    }
    static func group(number: Int = 1) -> String {
        #"{"clientId":"\#(UUID().uuidString)","groupNumber":\#(number),"distance":100,"numberOfShots":5,"groupSizeMoa":0.8,"meanRadiusMoa":0.3,"ammunitionId":3,"notes":"g"}"#
    }
    static func measurement(clientId: String = UUID().uuidString) -> String {
        #"{"clientId":"\#(clientId)","holePositions":[{"x":0.1,"y":-0.2},{"x":1,"y":2}],"bulletDiameter":0.308,"calibrationMethod":"grid","measurementConfidence":0.9,"horizontalSpread":0.5,"verticalSpread":0.4,"cep50":0.2}"#
    }
}

/// Images that pass the server's magic-byte check, and one that does not.
enum SampleImages {
    static let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0] + Array(repeating: 0x11, count: 300)
    static let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 0x22, count: 300)
    static let heic: [UInt8] = [0, 0, 0, 0x18] + Array("ftypheic".utf8) + Array(repeating: 0x33, count: 300)
    static let webp: [UInt8] =
        Array("RIFF".utf8) + [0x10, 0, 0, 0] + Array("WEBPVP8 ".utf8) + Array(repeating: 0x44, count: 300)
    static let text: [UInt8] = Array("this is not an image at all".utf8)
}

extension DevServerClient {
    /// A new session with one group in it, for image uploads: the group's id and client id.
    func makeGroup() async throws -> (id: Int, clientId: String) {
        let session = try #require(try await post("/api/sessions", json: Bodies.session()).id)
        let clientId = UUID().uuidString
        let group = try await post(
            "/api/sessions/\(session)/groups",
            json: #"{"clientId":"\#(clientId)","groupNumber":1,"distance":100,"numberOfShots":3}"#)
        return (try #require(group.id), clientId)
    }
}
