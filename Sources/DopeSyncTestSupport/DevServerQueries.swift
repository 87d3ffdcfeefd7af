import AsyncHTTPClient
import DopeSync
import DopeSyncDevServer
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
import Testing

extension RunningDevServer {
    /// GETs `path` with the server's token and decodes the JSON answer.
    public func getJSON(_ path: String) async throws -> Any {
        try JSONSerialization.jsonObject(with: try await get(path))
    }

    /// GETs `path` with the server's token and decodes the answer as `T`.
    public func get<T: Decodable>(_ path: String, as type: T.Type) async throws -> T {
        try JSONDecoder().decode(T.self, from: try await get(path))
    }

    /// POSTs a JSON document to an admin route.
    public func postJSON(_ path: String, _ document: [String: any Sendable]) async throws {
        try await sendJSON(.POST, path, document)
    }

    /// PUTs a JSON document to an admin route (`/admin/faults`: the faults from now on).
    public func putJSON(_ path: String, _ document: [String: any Sendable]) async throws {
        try await sendJSON(.PUT, path, document)
    }

    private func sendJSON(_ method: HTTPMethod, _ path: String, _ document: [String: any Sendable]) async throws {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        request.headers.add(name: "Authorization", value: authorization)
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: document)))
        _ = try await execute(request)
    }

    /// Records created per kind (`session`, `dope`, `reading`, …), duplicates included.
    public func createdCounts() async throws -> [String: Int] {
        struct Stats: Decodable { var created: [String: Int] }
        return try await get("/admin/stats", as: Stats.self).created
    }

    /// `/admin/stats`' reads of each reference list by status: `["ammunition": ["200": 1, "304": 0]]`.
    public func referenceListReads() async throws -> [String: [String: Int]] {
        struct Stats: Decodable { var referenceLists: [String: [String: Int]] }
        return try await get("/admin/stats", as: Stats.self).referenceLists
    }

    /// Every request the server received (the log keeps the last 10,000), in arrival order.
    public func requestLog() async throws -> [LoggedRequest] {
        struct Page: Decodable { var requests: [LoggedRequest] }
        return try await get("/admin/requests", as: Page.self).requests
    }

    private func get(_ path: String) async throws -> Data {
        var request = HTTPClientRequest(url: baseURL + path)
        request.headers.add(name: "Authorization", value: authorization)
        return try await execute(request)
    }

    /// Over plain HTTP through the shared client; over TLS through a client of its own that
    /// skips verification: these are the test's own questions to its own server, and what
    /// dopesync trusts is what the tests prove, not this.
    private func execute(_ request: HTTPClientRequest) async throws -> Data {
        guard configuration.tls != nil else { return try await Self.execute(request, on: .shared) }
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .none
        var configuration = HTTPClient.Configuration()
        configuration.tlsConfiguration = tls
        return try await HTTPClient.withHTTPClient(configuration: configuration) { client in
            try await Self.execute(request, on: client)
        }
    }

    private static func execute(_ request: HTTPClientRequest, on client: HTTPClient) async throws -> Data {
        let response = try await client.execute(request, timeout: .seconds(30))
        return Data(try await response.body.collect(upTo: 64 << 20).readableBytesView)
    }
}

/// One line of the dev server's request log (`GET /admin/requests`).
public struct LoggedRequest: Decodable, Sendable {
    public var method: String
    public var path: String
    /// The `Idempotency-Key` sent, if any.
    public var key: String?
    public var status: Int
    /// Whether the server answered it as a replay of what its key had already created.
    public var replayed: Bool
    /// When its head arrived, in milliseconds since the server started (entries are listed as
    /// they are answered).
    public var receivedMs: Double

    enum CodingKeys: String, CodingKey {
        case method, path, status, replayed, receivedMs
        case key = "idempotencyKey"
    }
}

/// What `GET /api/sessions/{id}` answers, as far as tests compare it with a bundle.
public struct SessionTreeSnapshot: Decodable, Sendable {
    public struct Record: Decodable, Sendable {
        public var id: Int
        public var clientId: String
    }
    public struct Chrono: Decodable, Sendable {
        public var id: Int
        public var clientId: String
        public var readings: [Record]
    }
    public struct Image: Decodable, Sendable {
        public var id: Int
        public var fileName: String
        public var sha256: String
    }
    public struct Group: Decodable, Sendable {
        public var id: Int
        public var clientId: String
        public var images: [Image]
    }
    public var id: Int
    public var clientId: String
    public var dope: [Record]
    public var chrono: [Chrono]
    public var groups: [Group]

    /// (file name, SHA-256) of every image, group by group.
    public var images: [(fileName: String, sha256: String)] {
        groups.flatMap { $0.images.map { ($0.fileName, $0.sha256) } }
    }
}

extension RunningDevServer {
    /// The tree of the one session with this client id; fails the lookup if there is not exactly one.
    public func sessionTree(clientID: String) async throws -> SessionTreeSnapshot {
        struct Page: Decodable { var items: [SessionTreeSnapshot.Record] }
        let items = try await get("/api/sessions?clientId=\(clientID)", as: Page.self).items
        guard items.count == 1 else {
            throw DevServerHarnessError(message: "\(items.count) sessions with client id \(clientID), not one")
        }
        return try await get("/api/sessions/\(items[0].id)", as: SessionTreeSnapshot.self)
    }
}

/// Every bundle synced once: in done/ and nowhere else, each record of each session on the
/// server once (the dev server refuses a child before its parent, so once is also in order).
public func expectAllSyncedOnce(
    _ samples: [SampleSession], spool: Spool, server: RunningDevServer,
    sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    #expect(try spool.names(.done).count == samples.count, sourceLocation: sourceLocation)
    #expect(try spool.names(.processing).isEmpty, sourceLocation: sourceLocation)
    #expect(try spool.names(.incoming).isEmpty, sourceLocation: sourceLocation)
    #expect(try spool.names(.failed).isEmpty, sourceLocation: sourceLocation)
    let created = try await server.createdCounts()
    #expect(created["session"] == samples.count, sourceLocation: sourceLocation)
    #expect(
        created.values.reduce(0, +) == samples.reduce(0) { $0 + $1.expectedRequestCount },
        sourceLocation: sourceLocation)
}
