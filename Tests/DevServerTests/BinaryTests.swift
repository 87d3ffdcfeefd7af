import AsyncHTTPClient
import DopeSyncTestSupport
import Foundation
import NIOCore
import NIOHTTP1
import Testing

/// The built `dopesync-devserver` executable as a real process (started with `Spawned`, as every
/// other real-process test is).
@Suite struct BinaryTests {
    /// A started `dopesync-devserver`: its process and the port from its listening line.
    struct Launched {
        let process: Spawned
        let port: Int

        func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }
    }

    /// Starts the executable with `arguments` (plus `--port 0`) and reads stdout until its
    /// listening line; throws if it ends without one.
    static func launch(_ arguments: [String]) async throws -> Launched {
        let executable = builtProduct("dopesync-devserver").path
        try #require(FileManager.default.isExecutableFile(atPath: executable), "build it first: \(executable)")
        let process = try await Spawned(
            executable, ["--port", "0", "--log-level", "warning"] + arguments, errors: .silenced)
        // Read stdout until the listening line (or the end of output, if the server died).
        let listening: String? = await onOwnThread {
            while let line = process.output.readLine() {
                if line.hasPrefix("listening on http://127.0.0.1:") { return line }
            }
            return nil
        }
        let line = try #require(listening, "no listening line on its standard output")
        let port = try #require(Int(line.split(separator: ":").last ?? ""), "\(line)")
        #expect(port > 0)
        return Launched(process: process, port: port)
    }

    @Test(arguments: [SIGTERM, SIGINT])
    func printsItsPortServesAndExitsCleanlyOnASignal(_ signal: Int32) async throws {
        let server = try await Self.launch(["--token", "binary-token"])
        var request = HTTPClientRequest(url: server.url("/api/health"))
        request.method = .GET
        let health = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        #expect(health.status.code == 200)
        var stats = HTTPClientRequest(url: server.url("/admin/stats"))
        stats.headers.add(name: "Authorization", value: "Bearer binary-token")
        #expect(try await HTTPClient.shared.execute(stats, timeout: .seconds(30)).status.code == 200)

        server.process.kill(signal)
        #expect(await server.process.finished() == 0, "a clean exit, not killed by the signal")
    }

    @Test func takesTheFlagsOfABackendWithoutKeysOrLookups() async throws {
        let server = try await Self.launch([
            "--token", "binary-token", "--ignore-idempotency-keys", "--no-lookups", "--lookups-status", "405",
        ])
        defer { server.process.kill(SIGTERM) }
        func send(_ method: HTTPMethod, _ path: String, body: String? = nil) async throws -> HTTPClientResponse {
            var request = HTTPClientRequest(url: server.url(path))
            request.method = method
            request.headers.add(name: "Authorization", value: "Bearer binary-token")
            if let body {
                request.headers.add(name: "Content-Type", value: "application/json")
                request.headers.add(name: "Idempotency-Key", value: "same-key")
                request.body = .bytes(ByteBuffer(string: body))
            }
            return try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        }
        let clientId = UUID().uuidString.lowercased()
        let body = #"{"clientId":"\#(clientId)","sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":1}"#
        var ids: [String] = []
        for _ in 0..<2 {
            let created = try await send(.POST, "/api/sessions", body: body)
            #expect(created.status.code == 201)
            ids.append(String(buffer: try await created.body.collect(upTo: 1 << 16)))
        }
        #expect(Set(ids).count == 2, "the resend made a second record: \(ids)")
        let lookup = try await send(.GET, "/api/sessions?clientId=\(clientId)")
        #expect(lookup.status.code == 405)
        #expect(lookup.headers.first(name: "Allow") == "POST")
        #expect(try await send(.DELETE, "/api/groups/1/images").headers.first(name: "Allow") == "POST")
        server.process.kill(SIGTERM)
        #expect(await server.process.finished() == 0)
    }

    @Test(arguments: [["--lookups-status", "405"], ["--no-lookups", "--lookups-status", "500"]])
    func refusesALookupsStatusItCannotUse(_ arguments: [String]) async throws {
        let process = try await Spawned(
            builtProduct("dopesync-devserver").path, ["--port", "0"] + arguments, errors: .silenced)
        #expect(await process.finished() == 64)  // EX_USAGE, argument parser's ValidationError
    }
}
