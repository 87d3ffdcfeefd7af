import ArgumentParser
import DopeSyncDevServer
import Logging

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `dopesync-devserver`: options and their checks only; the server is ``DevServer``.
@main
struct DevServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dopesync-devserver",
        abstract: "The TrueDope API on loopback, for demos, tests and benchmarks.",
        discussion: """
            Prints `listening on http://HOST:PORT` (https with --tls-cert) on stdout once it accepts connections; logs go \
            to stderr. SIGTERM or SIGINT stops it cleanly (exit 0). Admin routes (same token): \
            GET /admin/stats, GET /admin/requests?since=N, POST /admin/reset, \
            GET|POST|PUT /admin/references, GET|PUT /admin/faults, GET /admin/sessions?clientId=, \
            GET /admin/sessions/ID (the lookups, served even with --no-lookups).
            """
    )

    @Option(help: "Interface to bind.") var host = "127.0.0.1"
    @Option(help: "Port to bind; 0 picks a free one.") var port = 8080
    @Option(help: "SQLite file for records and idempotency keys (default: in memory, lost on exit).") var db: String?
    @Option(help: "Bearer token accepted (default: $DOPESYNC_DEVSERVER_TOKEN, else dev-token).") var token: String?

    @Option(help: "Rifle setup ids known, e.g. 1-100 or 1,2,5-9.") var rifles = "1-100"
    @Option(help: "Location ids known.") var locations = "1-50"
    @Option(help: "Ammunition ids known.") var ammunition = "1-500"
    @Option(name: .customLong("ammo-lots"), help: "Ammo lot ids known.") var ammoLots = "1-500"

    @Option(name: .customLong("max-image-bytes"), help: "Largest image accepted (413 above).") var maxImageBytes =
        64 * 1024 * 1024
    @Option(name: .customLong("max-json-bytes"), help: "Largest JSON body accepted (413 above).") var maxJSONBytes =
        1024 * 1024

    @Option(name: .customLong("fail-rate"), help: "Probability of a 500/503 on an /api POST.") var failRate = 0.0
    @Option(name: .customLong("rate-limit-rate"), help: "Probability of a 429 with Retry-After on an /api POST.")
    var rateLimitRate = 0.0
    @Option(
        name: .customLong("drop-after-commit-rate"),
        help: "Probability of committing, then closing the connection unanswered.")
    var dropAfterCommitRate = 0.0
    @Option(name: .customLong("latency-ms"), help: "Extra latency A-B (milliseconds) on /api POSTs.") var latencyMs =
        "0"
    @Option(name: .customLong("retry-after"), help: "Retry-After seconds on injected 429/503.") var retryAfter = 1
    @Option(help: "Seed for the fault generator.") var seed: UInt64 = 0

    @Flag(
        name: .customLong("ignore-idempotency-keys"),
        help: "Accept Idempotency-Key and ignore it: every POST creates a record.")
    var ignoreIdempotencyKeys = false

    @Option(
        name: .customLong("redirect"),
        help: ArgumentHelp(
            "Answer every /api POST with this redirect (301, 302, 303, 307, 308) to /elsewhere/PATH, "
                + "where any request gets 200 {\"id\": 424242}."))
    var redirect: Int?
    @Flag(
        name: .customLong("answer-creates-without-client-id"),
        help: "Answer a new record's 201 with {\"id\": N} only, without its clientId.")
    var answerCreatesWithoutClientID = false

    @Flag(
        name: .customLong("no-lookups"),
        help: "Answer GET /api/sessions?clientId= and GET /api/sessions/ID as a server without them.")
    var noLookups = false
    @Flag(
        name: .customLong("no-reference-lists"),
        help: "Answer GET /api/rifles, /api/ammunition and /api/locations with 404, as an older API.")
    var noReferenceLists = false
    @Flag(
        name: .customLong("no-lots-in-list"),
        help: "List ammunition without its lots, as an API from before lots (creates still check ammoLotId).")
    var noLotsInList = false
    @Option(
        name: .customLong("forbid-body"),
        help: "Answer 403 (an HTML page, as a web application firewall) to an /api POST whose body holds this text.")
    var forbidBody: String?
    @Option(
        name: .customLong("slow-body"),
        help: "Send the body of answers to '[METHOD ]PATH' (a path prefix) one byte at a time (a stalled API or proxy)."
    )
    var slowBody: String?
    @Option(name: .customLong("slow-body-interval"), help: "With --slow-body: seconds between bytes (default 5).")
    var slowBodyInterval: Double = 5
    @Option(name: .customLong("lookups-status"), help: "With --no-lookups: 404 (default) or 405 on those GETs.")
    var lookupsStatus: Int?

    @Option(name: .customLong("tls-cert"), help: "Serve HTTPS with this PEM certificate chain (needs --tls-key).")
    var tlsCert: String?
    @Option(name: .customLong("tls-key"), help: "The PEM private key of --tls-cert.") var tlsKey: String?
    @Flag(name: .customLong("http2"), help: "With TLS, offer HTTP/2 (h2) through ALPN next to HTTP/1.1.")
    var http2 = false

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel = "info"
    @Option(
        name: .customLong("request-log-capacity"),
        help: "How many recent requests GET /admin/requests keeps, with their arrival times and durations.")
    var requestLogCapacity = DevServerConfiguration().requestLogCapacity

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0...65535") }
        for (name, rate) in [
            ("--fail-rate", failRate), ("--rate-limit-rate", rateLimitRate),
            ("--drop-after-commit-rate", dropAfterCommitRate),
        ] {
            guard (0...1).contains(rate) else { throw ValidationError("\(name) must be between 0 and 1") }
        }
        guard maxImageBytes > 0, maxJSONBytes > 0 else { throw ValidationError("size limits must be > 0") }
        guard requestLogCapacity > 0 else { throw ValidationError("--request-log-capacity must be > 0") }
        if let lookupsStatus {
            guard noLookups else { throw ValidationError("--lookups-status needs --no-lookups") }
            guard MissingLookupsStatus(rawValue: lookupsStatus) != nil else {
                throw ValidationError("--lookups-status must be 404 or 405")
            }
        }
        guard (tlsCert == nil) == (tlsKey == nil) else { throw ValidationError("--tls-cert and --tls-key go together") }
        guard !http2 || tlsCert != nil else { throw ValidationError("--http2 needs --tls-cert and --tls-key") }
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level: unknown level \(logLevel)")
        }
        _ = try makeConfiguration()
    }

    func makeConfiguration() throws -> DevServerConfiguration {
        var configuration = DevServerConfiguration()
        configuration.host = host
        configuration.port = port
        configuration.databasePath = db
        configuration.token = token ?? ProcessInfoEnvironment.value("DOPESYNC_DEVSERVER_TOKEN") ?? "dev-token"
        do {
            configuration.references.rifleSetups = try IDSet(parsing: rifles)
            configuration.references.locations = try IDSet(parsing: locations)
            configuration.references.ammunition = try IDSet(parsing: ammunition)
            configuration.references.ammoLots = try IDSet(parsing: ammoLots)
            configuration.faults.latencyMilliseconds = try .parsingMilliseconds(latencyMs)
        } catch {
            throw ValidationError("\(error)")
        }
        configuration.maxImageBytes = maxImageBytes
        configuration.maxJSONBytes = maxJSONBytes
        configuration.requestLogCapacity = requestLogCapacity
        configuration.faults.failRate = failRate
        configuration.faults.rateLimitRate = rateLimitRate
        configuration.faults.dropAfterCommitRate = dropAfterCommitRate
        configuration.faults.retryAfterSeconds = retryAfter
        configuration.faults.seed = seed
        configuration.ignoreIdempotencyKeys = ignoreIdempotencyKeys
        configuration.lookups = !noLookups
        configuration.referenceLists = !noReferenceLists
        configuration.lotsInList = !noLotsInList
        configuration.forbiddenBodyPattern = forbidBody
        configuration.slowBody = slowBody.map {
            DevServerConfiguration.SlowBody($0, byteInterval: .milliseconds(Int64(slowBodyInterval * 1000)))
        }
        if let redirect {
            guard DevServerConfiguration.redirectStatuses.contains(redirect) else {
                throw ValidationError("--redirect takes 301, 302, 303, 307 or 308 (was \(redirect))")
            }
            configuration.redirectStatus = redirect
        }
        configuration.answerCreatesWithoutClientID = answerCreatesWithoutClientID
        configuration.lookupsStatus = lookupsStatus.flatMap(MissingLookupsStatus.init(rawValue:)) ?? .notFound
        if let tlsCert, let tlsKey {
            configuration.tls = DevServerTLS(certificateChainPath: tlsCert, privateKeyPath: tlsKey, http2: http2)
        }
        return configuration
    }

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        // The executable owns logging: stderr, so stdout carries only the listening line.
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: DevServer.name)
        let configuration = try makeConfiguration()
        try await DevServer.run(configuration: configuration, logger: logger, handlingSignals: true) { port in
            // Straight to file descriptor 1, unbuffered: a parent reading a pipe sees it at once.
            let line = Array("listening on \(configuration.scheme)://\(configuration.host):\(port)\n".utf8)
            _ = line.withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress, $0.count) }
        }
    }
}

/// The environment without Foundation.
enum ProcessInfoEnvironment {
    static func value(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
