import Hummingbird
import Logging
import NIOCore

/// The TrueDope API on loopback (api.yaml), for demos, tests and benchmarks.
///
/// Start it in-process with ``run(configuration:logger:handlingSignals:onListening:)`` (tests
/// usually go through `withDevServer` in DopeSyncTestSupport), or as the `dopesync-devserver`
/// executable. Routes: every path of api.yaml under `/api`, and the admin routes documented on
/// ``AdminRoutes`` under `/admin`.
public enum DevServer {
    public static let name = "dopesync-devserver"

    /// Opens the database, binds, calls `onListening` with the bound port once the server
    /// accepts connections, and serves until the task is cancelled or, with `handlingSignals`,
    /// until SIGTERM or SIGINT (graceful shutdown: in-flight requests finish).
    ///
    /// Throws if the database cannot be opened or the address cannot be bound.
    public static func run(
        configuration: DevServerConfiguration,
        logger: Logger,
        handlingSignals: Bool = false,
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) async throws {
        let state = try DevServerState(configuration: configuration)
        let router = DevServerRoutes.router(state: state)
        let application = Application(
            router: router,
            configuration: ApplicationConfiguration(
                address: .hostname(configuration.host, port: configuration.port),
                serverName: nil
            ),
            onServerRunning: { channel in
                await onListening(channel.localAddress?.port ?? configuration.port)
            },
            logger: logger
        )
        if handlingSignals {
            try await application.runService()
        } else {
            try await application.run()
        }
    }
}
