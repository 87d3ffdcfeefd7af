import DopeSyncDevServer
import Logging

/// A dev server running in this process for the length of a `withDevServer` body.
public struct RunningDevServer: Sendable {
    /// The bound port (the configuration asked for port 0).
    public let port: Int
    /// `http://127.0.0.1:PORT` (`https://` with TLS), no trailing slash.
    public let baseURL: String
    /// The bearer token it accepts.
    public let token: String
    /// The configuration it runs with (port as asked, not as bound).
    public let configuration: DevServerConfiguration

    /// `Bearer TOKEN`, for an `Authorization` header.
    public var authorization: String { "Bearer \(token)" }
}

/// Runs a dev server on a free port for the length of `body`, then stops it.
///
/// The port in `configuration` is ignored (0 is bound); `body` starts only once the server
/// accepts connections (no sleeping), and the server is shut down gracefully when `body`
/// returns or throws (requests a test left hanging are cancelled 2 s later).
/// A server that cannot start (a bad database path, say) makes this throw.
public func withDevServer<Result>(
    _ configuration: DevServerConfiguration = DevServerConfiguration(),
    logger: Logger = Logger(label: "dopesync.devserver.test", factory: { _ in SwiftLogNoOpLogHandler() }),
    _ body: (RunningDevServer) async throws -> Result
) async throws -> Result {
    var configuration = configuration
    configuration.port = 0
    let serverConfiguration = configuration
    let (shutdown, requestShutdown) = AsyncStream.makeStream(of: Void.self)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
        group.addTask {
            // Finishing the stream on every exit lets a server that fails to start end the wait.
            defer { portContinuation.finish() }
            try await DevServer.run(configuration: serverConfiguration, logger: logger, shutdown: shutdown) {
                port in
                portContinuation.yield(port)
            }
        }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            _ = try await group.next()  // rethrows why the server stopped
            throw DevServerHarnessError(message: "the dev server stopped before listening")
        }
        let server = RunningDevServer(
            port: port, baseURL: "\(serverConfiguration.scheme)://\(serverConfiguration.host):\(port)",
            token: serverConfiguration.token,
            configuration: serverConfiguration)
        let result: Swift.Result<Result, any Error>
        do {
            result = .success(try await body(server))
        } catch {
            result = .failure(error)
        }
        requestShutdown.finish()
        // What the server throws on the way out is not news.
        try? await group.waitForAll()
        return try result.get()
    }
}

/// The harness could not provide a running server.
public struct DevServerHarnessError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public var description: String { message }
}

extension DevServerConfiguration {
    /// An API from before the reference lists: their GETs answer 404, and an unknown id is
    /// refused only by the create that names it, mid-bundle.
    public static var withoutReferenceLists: DevServerConfiguration {
        var configuration = DevServerConfiguration()
        configuration.referenceLists = false
        return configuration
    }
}
