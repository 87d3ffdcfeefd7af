import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// `dopesync-bench devserver-load`: small JSON POSTs/s and 1 MiB image uploads/s against a running
/// dev server, over N keep-alive connections for D seconds, median of a few runs; one JSON line out.
struct DevServerLoad: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devserver-load",
        abstract: "Measure a running dopesync-devserver: JSON POSTs/s and image uploads/s."
    )

    @Option(help: "Base URL of the dev server.") var url = "http://127.0.0.1:8080"
    @Option(help: "Bearer token.") var token = "dev-token"
    @Option(help: "Concurrent keep-alive connections.") var connections = 4
    @Option(help: "Seconds per run.") var duration = 5.0
    @Option(help: "Runs per measurement (the median is reported).") var runs = 3
    @Option(name: .customLong("image-bytes"), help: "Size of each uploaded image.") var imageBytes = 1 << 20
    @Option(help: "What to measure: json, image or both.") var mode = "both"
    @Flag(name: .customLong("no-keys"), help: "Send no Idempotency-Key (by default each POST has a fresh one).")
    var noKeys = false

    func validate() throws {
        guard connections >= 1, duration > 0, runs >= 1, imageBytes >= 16 else {
            throw ValidationError("--connections, --duration, --runs and --image-bytes must be positive")
        }
        guard ["json", "image", "both"].contains(mode) else {
            throw ValidationError("--mode must be json, image or both")
        }
    }

    func run() async throws {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(
            idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: connections)
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
        do {
            let report = try await measure(client)
            try await client.shutdown()
            print(report)
        } catch {
            try? await client.shutdown()  // the error that got here is the one to report
            throw error
        }
    }

    private func measure(_ client: HTTPClient) async throws -> String {
        let session = try await post(
            client, "/api/sessions",
            json: #"{"clientId":"\#(UUID().uuidString)","sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":1}"#)
        let group = try await post(
            client, "/api/sessions/\(session)/groups",
            json: #"{"clientId":"\#(UUID().uuidString)","groupNumber":1,"distance":100,"numberOfShots":5}"#)

        var fields: [String] = [
            #""connections":\#(connections)"#, #""durationSeconds":\#(duration)"#, #""idempotencyKeys":\#(!noKeys)"#,
        ]
        if mode != "image" {
            let dopePath = "/api/sessions/\(session)/dope"
            let rates = try await repeatedRuns(client) { _ in
                let body = ByteBuffer(
                    string:
                        #"{"clientId":"\#(UUID().uuidString)","distance":100,"elevationMoa":1.5,"windageMoa":-0.25,"ammunitionId":3}"#
                )
                return (dopePath, body, "application/json")
            }
            fields.append(#""jsonPostsPerSecond":\#(summary(rates))"#)
        }
        if mode != "json" {
            let boundary = "dopesync-bench-boundary"
            var body = ByteBuffer()
            for (name, value) in [("clientId", UUID().uuidString), ("role", "photo"), ("fileName", "bench.jpg")] {
                body.writeString(
                    "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"\r\n\r\n\(value)\r\n")
            }
            body.writeString(
                "--\(boundary)\r\nContent-Disposition: form-data; name=\"file\"; filename=\"bench.jpg\"\r\nContent-Type: image/jpeg\r\n\r\n"
            )
            body.writeBytes([0xFF, 0xD8, 0xFF, 0xE0])
            body.writeRepeatingByte(0x5A, count: imageBytes - 4)
            body.writeString("\r\n--\(boundary)--\r\n")
            let imagePath = "/api/groups/\(group)/images"
            let image = body
            let rates = try await repeatedRuns(client) { _ in
                (imagePath, image, "multipart/form-data; boundary=\(boundary)")
            }
            fields.append(#""imageBytes":\#(imageBytes)"#)
            fields.append(#""imageUploadsPerSecond":\#(summary(rates))"#)
        }
        return "{" + fields.joined(separator: ",") + "}"
    }

    private func summary(_ rates: [Double]) -> String {
        let sorted = rates.sorted()
        let median = sorted[sorted.count / 2]
        let runs = rates.map { String(format: "%.0f", $0) }.joined(separator: ",")
        return #"{"median":\#(String(format: "%.0f", median)),"runs":[\#(runs)]}"#
    }

    private var target: LoadTarget { LoadTarget(baseURL: url, token: token, sendsKeys: !noKeys) }

    /// Runs `runs` timed rounds of `connections` workers posting back to back; returns 2xx/s per round.
    private func repeatedRuns(
        _ client: HTTPClient, _ makeRequest: @escaping @Sendable (Int) -> (String, ByteBuffer, String)
    ) async throws -> [Double] {
        var rates: [Double] = []
        for _ in 0..<runs {
            let clock = ContinuousClock()
            let start = clock.now
            let deadline = start + .milliseconds(Int(duration * 1000))
            let target = self.target
            let (succeeded, failed) = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
                for worker in 0..<connections {
                    group.addTask {
                        var succeeded = 0
                        var failed = 0
                        while clock.now < deadline {
                            let (path, body, contentType) = makeRequest(worker)
                            let status = try await target.send(client, path, body: body, contentType: contentType)
                            if (200..<300).contains(status) { succeeded += 1 } else { failed += 1 }
                        }
                        return (succeeded, failed)
                    }
                }
                return try await group.reduce((0, 0)) { ($0.0 + $1.0, $0.1 + $1.1) }
            }
            let elapsed = clock.now - start
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            if failed > 0 { FileHandle.standardError.write(Data("warning: \(failed) requests were not 2xx\n".utf8)) }
            rates.append(Double(succeeded) / seconds)
        }
        return rates
    }

    private func post(_ client: HTTPClient, _ path: String, json: String) async throws -> Int {
        var request = HTTPClientRequest(url: url + path)
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: json))
        let response = try await client.execute(request, timeout: .seconds(60))
        let body = try await response.body.collect(upTo: 1 << 20)
        guard response.status.code == 201,
            let object = try JSONSerialization.jsonObject(with: Data(String(buffer: body).utf8)) as? [String: Any],
            let id = object["id"] as? Int
        else { throw ValidationError("POST \(path) answered \(response.status.code): \(String(buffer: body))") }
        return id
    }
}

/// Where and how the load generator posts (Sendable, for its worker tasks).
struct LoadTarget: Sendable {
    let baseURL: String
    let token: String
    let sendsKeys: Bool

    /// Posts once and returns the status; the body is read and dropped.
    func send(_ client: HTTPClient, _ path: String, body: ByteBuffer, contentType: String) async throws -> Int {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "Content-Type", value: contentType)
        if sendsKeys { request.headers.add(name: "Idempotency-Key", value: UUID().uuidString) }
        request.body = .bytes(body)
        let response = try await client.execute(request, timeout: .seconds(60))
        _ = try await response.body.collect(upTo: 1 << 20)
        return Int(response.status.code)
    }
}
