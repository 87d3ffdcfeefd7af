import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import HummingbirdTLS
import Logging
import NIOCore
import NIOSSL
import ServiceLifecycle
import UnixSignals

/// The TrueDope API on loopback (docs/api.yaml), for demos, tests and benchmarks.
///
/// Start it in-process with ``run(configuration:logger:handlingSignals:shutdown:shutdownGrace:onListening:)`` (tests
/// usually go through `withDevServer` in DopeSyncTestSupport), or as the `dopesync-devserver`
/// executable. Routes: every path of docs/api.yaml under `/api`, and the admin routes documented on
/// ``AdminRoutes`` under `/admin`.
public enum DevServer {
    public static let name = "dopesync-devserver"

    /// Opens the database, binds, calls `onListening` with the bound port once the server
    /// accepts connections, and serves until the task is cancelled, until `shutdown` ends, or,
    /// with `handlingSignals`, until SIGTERM or SIGINT. The last two shut it down gracefully: it
    /// stops accepting, lets in-flight requests finish for up to `shutdownGrace`, then cancels
    /// them. Cancelling the task instead can end it with a connection accepted but not yet
    /// served, which traps in NIO ("Deinited NIOAsyncWriter without calling finish()",
    /// apple/swift-nio#3481): a test's server is stopped through `shutdown`.
    ///
    /// Throws if the database cannot be opened, the TLS files cannot be read or the address
    /// cannot be bound.
    public static func run(
        configuration: DevServerConfiguration,
        logger: Logger,
        handlingSignals: Bool = false,
        shutdown: AsyncStream<Void>? = nil,
        shutdownGrace: Duration = .seconds(2),
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) async throws {
        let state = try DevServerState(configuration: configuration)
        let router = DevServerRoutes.router(state: state)
        let application = Application(
            router: router,
            server: try serverBuilder(configuration.tls),
            configuration: ApplicationConfiguration(
                address: .hostname(configuration.host, port: configuration.port),
                serverName: nil
            ),
            onServerRunning: { channel in
                await onListening(channel.localAddress?.port ?? configuration.port)
            },
            logger: logger
        )
        let served: Result<Void, any Error>
        do {
            var group = ServiceGroupConfiguration(
                services: [application], gracefulShutdownSignals: handlingSignals ? [.sigterm, .sigint] : [],
                logger: logger)
            group.maximumGracefulShutdownDuration = shutdownGrace
            // No `shutdown`: a stream that never ends, so only a signal or cancellation stops it.
            try await runUntilEnded(
                ServiceGroup(configuration: group), shutdown: shutdown ?? AsyncStream { _ in })
            served = .success(())
        } catch {
            served = .failure(error)
        }
        await state.store.close()
        try served.get()
    }

    /// Runs `group` until it ends, shutting it down gracefully once `shutdown` ends.
    private static func runUntilEnded(_ group: ServiceGroup, shutdown: AsyncStream<Void>) async throws {
        try await withThrowingTaskGroup(of: Bool.self) { tasks in
            tasks.addTask {
                try await group.run()
                return true
            }
            tasks.addTask {
                for await _ in shutdown {}
                await group.triggerGracefulShutdown()
                return false
            }
            while let groupEnded = try await tasks.next() {
                if groupEnded { break }
            }
            tasks.cancelAll()
        }
    }

    /// HTTP/1.1 in the clear, HTTP/1.1 over TLS, or h2 and HTTP/1.1 over TLS (chosen by ALPN).
    static func serverBuilder(_ tls: DevServerTLS?) throws -> HTTPServerBuilder {
        guard let tls else { return .http1() }
        let chain: [NIOSSLCertificate]
        let key: NIOSSLPrivateKey
        do {
            chain = try NIOSSLCertificate.fromPEMFile(tls.certificateChainPath)
        } catch {
            throw DevServerConfigurationError(
                "--tls-cert \(tls.certificateChainPath): not a PEM certificate (\(error))")
        }
        do {
            key = try NIOSSLPrivateKey(file: tls.privateKeyPath, format: .pem)
        } catch {
            throw DevServerConfigurationError("--tls-key \(tls.privateKeyPath): not a PEM private key (\(error))")
        }
        guard !chain.isEmpty else {
            throw DevServerConfigurationError("--tls-cert \(tls.certificateChainPath): holds no certificate")
        }
        let configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        return tls.http2
            ? try .http2Upgrade(tlsConfiguration: configuration)
            : try .tls(.http1(), tlsConfiguration: configuration)
    }
}
