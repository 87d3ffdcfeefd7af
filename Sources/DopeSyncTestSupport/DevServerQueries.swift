import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

extension RunningDevServer {
    /// GETs `path` with the server's token and decodes the JSON answer.
    public func getJSON(_ path: String) async throws -> Any {
        var request = HTTPClientRequest(url: baseURL + path)
        request.headers.add(name: "Authorization", value: authorization)
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 64 << 20)
        return try JSONSerialization.jsonObject(with: Data(body.readableBytesView))
    }

    /// POSTs a JSON document to an admin route.
    public func postJSON(_ path: String, _ document: [String: any Sendable]) async throws {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = .POST
        request.headers.add(name: "Authorization", value: authorization)
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: document)))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        _ = try await response.body.collect(upTo: 1 << 20)
    }

    /// Records created per kind (`session`, `dope`, `reading`, …), duplicates included.
    public func createdCounts() async throws -> [String: Int] {
        let stats = try await getJSON("/admin/stats") as! [String: Any]
        return stats["created"] as! [String: Int]
    }

    /// Every request the server received (the log keeps the last 10,000), in arrival order.
    public func requestLog() async throws -> [(path: String, key: String?, status: Int)] {
        let page = try await getJSON("/admin/requests") as! [String: Any]
        let requests = page["requests"] as! [[String: Any]]
        return requests.map { ($0["path"] as! String, $0["idempotencyKey"] as? String, $0["status"] as? Int ?? 0) }
    }
}
