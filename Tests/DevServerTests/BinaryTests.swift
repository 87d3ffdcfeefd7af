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

    @Test(arguments: [SIGTERM, SIGINT])
    func printsItsPortServesAndExitsCleanlyOnASignal(_ signal: Int32) async throws {
        let executable = Self.executable
        try #require(FileManager.default.isExecutableFile(atPath: executable.path), "build it first: \(executable.path)")
        let process = Process()
        process.executableURL = executable
        process.arguments = ["--port", "0", "--log-level", "warning", "--token", "binary-token"]
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

        var request = HTTPClientRequest(url: "http://127.0.0.1:\(boundPort)/api/health")
        request.method = .GET
        let health = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        #expect(health.status.code == 200)
        var stats = HTTPClientRequest(url: "http://127.0.0.1:\(boundPort)/admin/stats")
        stats.headers.add(name: "Authorization", value: "Bearer binary-token")
        #expect(try await HTTPClient.shared.execute(stats, timeout: .seconds(30)).status.code == 200)

        kill(process.processIdentifier, signal)
        var iterator = exits.makeAsyncIterator()
        let exit = try #require(await iterator.next())
        #expect(exit.0 == .exit)
        #expect(exit.1 == 0)
    }
}
