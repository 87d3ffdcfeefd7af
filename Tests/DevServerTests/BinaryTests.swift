import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing

/// The built `dopesync-devserver` executable as a real process.
@Suite struct BinaryTests {
    /// The executable beside this test bundle in the build folder.
    static var executable: URL {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("dopesync-devserver")
    }

    /// A started `dopesync-devserver`: its process, the port from its listening line, and how it ends.
    struct Launched {
        let process: Process
        let port: Int
        let exits: AsyncStream<(Process.TerminationReason, Int32)>

        func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }
    }

    /// Starts the executable with `arguments` (plus `--port 0`) and reads stdout until its
    /// listening line; throws if it ends without one.
    static func launch(_ arguments: [String]) async throws -> Launched {
        let executable = Self.executable
        try #require(
            FileManager.default.isExecutableFile(atPath: executable.path), "build it first: \(executable.path)")
        let process = Process()
        process.executableURL = executable
        process.arguments = ["--port", "0", "--log-level", "warning"] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice

        let (exits, exitContinuation) = AsyncStream.makeStream(of: (Process.TerminationReason, Int32).self)
        process.terminationHandler = { process in
            exitContinuation.yield((process.terminationReason, process.terminationStatus))
            exitContinuation.finish()
        }
        let (chunks, chunkContinuation) = AsyncStream.makeStream(of: String.self)
        output.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if data.isEmpty {
                handle.readabilityHandler = nil
                chunkContinuation.finish()
            } else {
                chunkContinuation.yield(String(decoding: data, as: UTF8.self))
            }
        }
        try process.run()

        // Read stdout until the listening line (or end of output, if the server died).
        var text = ""
        var port: Int?
        for await chunk in chunks {
            text += chunk
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("listening on http://127.0.0.1:") }) {
                port = Int(line.split(separator: ":").last ?? "")
                break
            }
        }
        let boundPort = try #require(port, "no listening line; stdout was: \(text)")
        #expect(boundPort > 0)
        return Launched(process: process, port: boundPort, exits: exits)
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

        kill(server.process.processIdentifier, signal)
        var iterator = server.exits.makeAsyncIterator()
        let exit = try #require(await iterator.next())
        #expect(exit.0 == .exit)
        #expect(exit.1 == 0)
    }

    @Test func takesTheFlagsOfABackendWithoutKeysOrLookups() async throws {
        let server = try await Self.launch([
            "--token", "binary-token", "--ignore-idempotency-keys", "--no-lookups", "--lookups-status", "405",
        ])
        defer { kill(server.process.processIdentifier, SIGTERM) }
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
    }

    @Test(arguments: [["--lookups-status", "405"], ["--no-lookups", "--lookups-status", "500"]])
    func refusesALookupsStatusItCannotUse(_ arguments: [String]) async throws {
        let process = Process()
        process.executableURL = Self.executable
        process.arguments = ["--port", "0"] + arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        let (exits, continuation) = AsyncStream.makeStream(of: Int32.self)
        process.terminationHandler = { process in
            continuation.yield(process.terminationStatus)
            continuation.finish()
        }
        try process.run()
        var iterator = exits.makeAsyncIterator()
        #expect(await iterator.next() == 64)  // EX_USAGE, argument parser's ValidationError
    }
}
