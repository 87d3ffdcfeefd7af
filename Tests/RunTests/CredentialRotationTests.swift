import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// Tokens expire and are rotated by secret managers: a run refused mid-way reads its token again
/// (the token file, or the token command) and goes on, instead of stopping the queue with 77.
@Suite struct CredentialRotationTests {
    /// A dev server whose token changes from `old` to `new` after `after` requests, and, at that same
    /// request, `rotate` called first (what the secret manager does to the worker's side).
    static func rotatingServer(after: Int, rotate: @escaping @Sendable () -> Void) -> DevServerConfiguration {
        var configuration = DevServerConfiguration()
        configuration.token = "old-token"
        configuration.tokenRotation = TokenRotation(afterRequests: after, newToken: "new-token", rotatingClient: rotate)
        return configuration
    }

    static func write(_ text: String, to path: String) throws {
        let temporary = path + ".new"
        try Data((text + "\n").utf8).write(to: URL(fileURLWithPath: temporary))
        #expect(chmod(temporary, 0o600) == 0)
        #expect(rename(temporary, path) == 0)  // as a secret manager replaces it
    }

    @Test(
        "the token file replaced mid-run: the refused step is sent again with the new token, the run ends 0, each record once"
    )
    func tokenFileRotatedMidRun() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...3).map { SampleSession(seed: UInt64(2800 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            let tokenFile = directory.appendingPathComponent("api-token").path
            try Self.write("old-token", to: tokenFile)
            let configuration = Self.rotatingServer(after: 20) {
                try? Self.write("new-token", to: tokenFile)
            }
            try await withDevServer(configuration) { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: "ignored", ["--token-file", tokenFile])
                #expect(status == 0, "\(output)")
                #expect(try spool.names(.done).count == samples.count)
                #expect(output.contains("sending the step again with the one read anew"), "\(output)")
                #expect(!output.contains("old-token") && !output.contains("new-token"), "a token was printed")
                let created = try await server.createdCounts()
                #expect(created.values.reduce(0, +) == samples.reduce(0) { $0 + $1.expectedRequestCount })
            }
        }
    }

    @Test(
        "a token command that prints a new token after the old one is refused works; one that fails is exit 77, named")
    func tokenCommand() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...2).map { SampleSession(seed: UInt64(2810 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            let vault = directory.appendingPathComponent("vault").path
            try Self.write("old-token", to: vault)
            let command = "echo 'asking the vault' >&2; cat \(vault)"
            let configuration = Self.rotatingServer(after: 10) { try? Self.write("new-token", to: vault) }
            try await withDevServer(configuration) { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: "", ["--token-command", command])
                #expect(status == 0, "\(output)")
                #expect(try spool.names(.done).count == samples.count)
                #expect(output.contains("asking the vault"), "the command's stderr goes to the log: \(output)")
                #expect(!output.contains("old-token") && !output.contains("new-token"), "a token was printed")

                let failing = "echo 'vault sealed' >&2; exit 3"
                let (refused, said) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: "", ["--token-command", failing])
                #expect(refused == 77, "\(said)")
                #expect(said.contains("the token command `\(failing)` failed (exit 3)"), "\(said)")
            }
        }
    }

    @Test(
        "a token command that keeps running, or leaves a child behind, after printing its token is not waited for",
        .timeLimit(minutes: 3))
    func tokenCommandThatLingers() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 2820)])
            var configuration = DevServerConfiguration()
            configuration.token = "the-token"
            try await withDevServer(configuration) { server in
                // (Their standard error closed, so that nothing but the token command's own output
                // could keep this test's pipe from the run open.) Each sleeps longer than the
                // test's time limit, even under a sanitizer: a run that waited for it cannot pass.
                for command in ["echo the-token; exec >&- 2>&-; sleep 200", "sleep 200 2>/dev/null & echo the-token"] {
                    let (status, output) = try await runToEnd(
                        spool, apiURL: server.baseURL, token: "", ["--token-command", command])
                    #expect(status == 0, "\(command): \(output)")
                }
                #expect(try spool.names(.done).count == 1)
            }
        }
    }

    @Test("a token with a control character is refused before it is sent, and never printed")
    func tokenWithControlCharacters() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 2830)])
            let tokenFile = directory.appendingPathComponent("api-token").path
            try Self.write("secret\u{1B}[0mtoken", to: tokenFile)
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: "", ["--token-file", tokenFile])
                #expect(status == 78, "\(output)")
                #expect(output.contains("characters an HTTP header cannot carry"), "\(output)")
                #expect(!output.contains("secret"), "the token was printed: \(output)")
                #expect(try await server.requestLog().filter { $0.path.hasPrefix("/api/") }.isEmpty)
            }
        }
    }
}
