import ArgumentParser
import DopeSync
import Foundation
import Logging
import NIOPosix
import ServiceLifecycle
import Synchronization
import UnixSignals

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upload what is due in the spool's incoming/ (and orphans in processing/), then exit.",
        discussion: """
            One batch, for cron or a systemd timer. Settings come from, highest first: these options, \
            the environment (DOPESYNC_API_URL, DOPESYNC_API_TOKEN, DOPESYNC_SPOOL, DOPESYNC_CONCURRENCY, \
            ... one DOPESYNC_ variable per option), the --job file, the defaults. The token is never printed.
            Exit codes: 0 done (nothing failed), 1 a bundle went to failed/, 64 bad command line, 70 a bug (nothing lost), \
            73 spool missing, unusable or another user's (as root), 75 API unreachable or kept failing, \
            76 the API's TLS certificate is not trusted, 77 credentials refused, 78 the job file or \
            configuration is invalid, or the API URL does not lead to the API (a redirect, an HTML page, \
            a 404 from the session collection). After SIGTERM or SIGINT: the same codes, for what the \
            run did until it stopped. See `man dopesync` and /usr/share/doc/dopesync/.
            """
    )

    /// `--spool` and `--job`; the job file may hold any of the options below as keys (see jobs/local.yaml).
    @OptionGroup var place: SpoolOption

    /// Where the API is and how to reach it: the same options as `check`.
    @OptionGroup var connection: APIOptions

    @Option(help: "Bundles uploaded at once, 1 to 64 (default 4).")
    var concurrency: Int?

    @Option(help: "Claim at most this many bundles.")
    var maxBundles: Int?

    @Option(help: "Stop claiming after this long (e.g. 90s, 10m, 1h).")
    var maxTime: String?

    @Option(help: "Only bundles unmodified for this long; 0 turns the guard off (default 5s).")
    var minAge: String?

    @Option(help: "A live progress line: auto (on a terminal), always, never.")
    var progress: String?

    @Option(help: "Log lines as text or json.")
    var logFormat: String?

    @Option(help: "The least level logged: trace, debug, info (default), notice, warning, error, critical.")
    var logLevel: String?

    @Option(help: "After the run, write Prometheus metrics to this file (node_exporter's textfile collector).")
    var metricsFile: String?

    @Option(help: "Cap the run's total upload rate, e.g. 500KiB/s or 2MB/s.")
    var maxRate: String?

    @Option(help: "Claim nothing while the spool's file system has less free: 1GiB (default), 500MB, 5%, or 0.")
    var minFreeSpace: String?

    @Option(help: "With --database: how long a claim lasts unless renewed (default 30s).")
    var lease: String?

    @Flag(help: "Create the spool if its folder does not exist (else a missing spool is exit 73).")
    var createSpool = false

    @Flag(help: "Run as root on a spool that belongs to another user (else refused, exit 73).")
    var allowRoot = false

    func run() async throws {
        let typed: [(RunSetting, String?)] =
            [
                (.spool, place.spool), (.concurrency, concurrency.map(String.init)),
                (.maxBundles, maxBundles.map(String.init)), (.maxTime, maxTime), (.minAge, minAge),
                (.progress, progress),
                (.logFormat, logFormat), (.logLevel, logLevel), (.metricsFile, metricsFile), (.maxRate, maxRate),
                (.minFreeSpace, minFreeSpace), (.database, place.database), (.lease, lease),
            ] + connection.typed
        let commandLine: [RunSetting: String] = typed.reduce(into: [:]) { options, pair in
            if let value = pair.1 { options[pair.0] = value }
        }
        // Reading the job and token files may block: not on the event loop this command starts on.
        let job = place.job
        var settings: RunConfiguration
        do {
            settings = try await NIOThreadPool.singleton.runIfActive {
                try resolveSettings(commandLine: commandLine, job: job, purpose: .run)
            }
            try await runTokenCommand(for: &settings)
        } catch let exit as ExitCode {
            // The alerts read the metrics file: a run the settings refused says so there too.
            // Root on another user's spool writes nothing, as a run refused to root does (the
            // file would be root's). Off the loop, as above: it reads the job file.
            let allowRoot = allowRoot
            let places = try? await NIOThreadPool.singleton.runIfActive { () -> (spool: String, metricsFile: String)? in
                guard
                    let places = RunConfiguration.reportingPlaces(
                        commandLine: commandLine, environment: ProcessInfo.processInfo.environment, jobFile: job)
                else { return nil }
                do throws(SpoolError) {
                    try Spool(root: places.spool).checkBeforeWriting(mayCreate: true, allowRoot: allowRoot)
                } catch {
                    if error.code == .runningAsRoot { return nil }
                }
                return places
            }
            if let places {
                let written = await RunMetrics.writeEndedBeforeStarting(
                    to: places.metricsFile, spool: Spool(root: places.spool),
                    summary: RunSummary(exitCode: exit.rawValue), floor: nil)
                if case .failure(let error) = written {
                    FileHandle.standardError.write(
                        Data("dopesync: error: cannot write the metrics file \(places.metricsFile): \(error)\n".utf8))
                }
            }
            throw exit
        }

        let format = settings.logFormat
        LoggingSystem.bootstrap { label in
            format == .json
                ? JSONLogHandler(label: label) as any LogHandler : EscapedTextLogHandler(label: label)
        }
        var logger = Logger(label: "dopesync")
        logger.logLevel = settings.logLevel
        for warning in settings.warnings { logger.warning("\(warning)") }
        // Which settings came from where, for the operator reading the log later; never the token.
        // At debug: a timer's idle run should say one line, the summary (which names the API).
        logger.debug("run starting", metadata: ["job": "\(place.job ?? "-")", "settings": "\(settings)"])
        var options = RunOptions(spoolRoot: settings.spool, apiURL: settings.apiURL, token: settings.token)
        options.tokenSource = settings.tokenSource
        options.concurrency = settings.concurrency
        options.maxBundles = settings.maxBundles
        options.maxTime = settings.maxTime
        options.minAge = settings.minAge
        options.metricsFile = settings.metricsFile
        options.minFreeSpace = settings.minFreeSpace
        options.pruneAfter = settings.pruneAfter
        options.database = settings.database
        options.createSpool = createSpool
        options.allowRoot = allowRoot
        options.network = APIClient.Network(
            caFile: settings.caFile, proxy: settings.proxy.proxy,
            rateLimit: settings.maxRate.map(UploadRateLimit.init(bytesPerSecond:)))
        // This very binary, even if a package upgrade replaced the file since the run started.
        options.isolatedReader = "/proc/self/exe"
        options.showProgress =
            settings.progress == .always || (settings.progress == .auto && isatty(STDERR_FILENO) == 1)

        // SIGINT/SIGTERM, through swift-service-lifecycle: the group's graceful shutdown asks the
        // run to stop claiming, let the steps in flight finish (cancelled after the stop's
        // grace), and give back.
        let service = RunService(worker: Worker(options: options, logger: logger), logger: logger)
        // The run ending is the group's end, not a failure of it.
        let configuration = ServiceGroupConfiguration.ServiceConfiguration(
            service: service, successTerminationBehavior: .gracefullyShutdownGroup)
        let group = ServiceGroup(
            configuration: .init(
                services: [configuration], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
        guard let (summary, status) = service.outcome.withLock({ $0 }) else {
            throw ExitCode(ExitStatus.software.rawValue)  // the service returned without running: a bug
        }
        // Where it went, once a run: the API (and any proxy), credentials masked.
        let route = settings.proxy.proxy.map { " through the proxy \($0)" } ?? ""
        print(summary.line + "; api \(MaskedURL.string(settings.apiURL))\(route)")
        if status != .success { throw ExitCode(status.rawValue) }
    }
}

/// `90s`, `10m`, `1h`, `2d`, `500ms`, or plain seconds.
func parseDuration(_ text: String) throws -> Duration {
    guard let duration = DurationText.parse(text) else {
        throw ValidationError("Not a duration: \(text) (\(DurationText.examples)).")
    }
    return duration
}

/// The API's URL, the token file, the CA file, the proxy and `--allow-insecure-http`, for `run`
/// and `check` alike.
struct APIOptions: ParsableArguments {
    @Option(help: "The API's base URL ($DOPESYNC_API_URL).")
    var api: String?

    @Option(help: "A file holding the API token (or the token itself in $DOPESYNC_API_TOKEN).")
    var tokenFile: String?

    @Option(help: "A command whose first line of output is the API token, run again after a refusal.")
    var tokenCommand: String?

    @Option(help: "Environment variables the token command gets besides PATH, HOME and the locale's (comma-separated).")
    var tokenCommandEnvironment: String?

    @Option(help: "A PEM file of CA certificates to trust for the API, besides the system's.")
    var caFile: String?

    @Option(
        help:
            "Reach the API through this http://[user:password@]host:port proxy, or none (default: $https_proxy, $http_proxy, $all_proxy, $no_proxy)."
    )
    var proxy: String?

    @Flag(help: "Allow an http:// API URL that is not loopback; the token then travels in clear.")
    var allowInsecureHTTP = false

    /// The settings typed, for ``RunConfiguration/resolve``.
    var typed: [(RunSetting, String?)] {
        [
            (.api, api), (.tokenFile, tokenFile), (.tokenCommand, tokenCommand),
            (.tokenCommandEnvironment, tokenCommandEnvironment), (.caFile, caFile), (.proxy, proxy),
            (.allowInsecureHTTP, allowInsecureHTTP ? "true" : nil),
        ]
    }
}

/// `--spool DIR` or `--job FILE` for the commands that only need the spool: resolved as
/// `run` resolves it (option, then DOPESYNC_SPOOL, then the job file, then ./spool).
struct SpoolOption: ParsableArguments {
    @Option(help: "The spool folder (default ./spool; $DOPESYNC_SPOOL).")
    var spool: String?

    @Option(
        help: ArgumentHelp(
            "A job file (YAML): for run and check, any of their options as keys (e.g. /etc/dopesync/production.yaml; "
                + "man dopesync, JOB FILE); for the others, its spool."))
    var job: String?

    @Option(
        help: ArgumentHelp(
            "The PostgreSQL database the spool's hosts share, postgresql://USER@HOST:PORT/DATABASE "
                + "($DOPESYNC_DATABASE_URL; default: the SQLite file in the spool)."))
    var database: String?

    func resolved() throws -> String { try settings().spool }

    /// The spool and the settings that do not need the API (the `min-age` that `status` shows).
    func settings() throws -> RunConfiguration {
        var typed: [RunSetting: String] = [:]
        typed[.spool] = spool
        typed[.database] = database
        return try resolveSettings(commandLine: typed, job: job, purpose: .spoolOnly)
    }
}

/// Resolves the settings from the command line, the environment and `--job`; a mistake ends the
/// process with a line naming the key and the file (exit 78, or 64 for the command line).
func resolveSettings(
    commandLine: [RunSetting: String], job: String?, purpose: RunConfiguration.Purpose
) throws -> RunConfiguration {
    do throws(ConfigurationError) {
        return try RunConfiguration.resolve(
            commandLine: commandLine, environment: ProcessInfo.processInfo.environment, jobFile: job, purpose: purpose)
    } catch {
        FileHandle.standardError.write(Data("dopesync: error: \(error)\n".utf8))
        throw ExitCode(error.exitStatus.rawValue)
    }
}

/// Runs the token command, where the credential is one (a child process, waited for without a
/// thread); a failure ends the process as a mistake in the settings does, with its exit status.
func runTokenCommand(for settings: inout RunConfiguration) async throws {
    do throws(ConfigurationError) {
        try await settings.runTokenCommand()
    } catch {
        FileHandle.standardError.write(Data("dopesync: error: \(error)\n".utf8))
        throw ExitCode(error.exitStatus.rawValue)
    }
}

/// One JSON object per log line on standard error, metadata as fields.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// The fields every line has.
    static let ownFields: Set<String> = ["time", "level", "message", "logger"]

    func log(event: LogEvent) {
        var fields: [String: String] = [
            "time": Date().formatted(.iso8601), "level": "\(event.level)", "message": "\(event.message)",
            "logger": label,
        ]
        // The event's own fields are never replaced: a metadata key that names one (a server's
        // `message`, say) is kept beside it as `metadata.KEY`.
        for (key, value) in metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 }) {
            fields[Self.ownFields.contains(key) ? "metadata." + key : key] = "\(value)"
        }
        // Strings only, so it cannot fail; if it did, a log line is not worth stopping the run for.
        if let data = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys]) {
            FileHandle.standardError.write(data + Data("\n".utf8))
        }
    }
}

/// One `dopesync run` as a service of swift-service-lifecycle, so that SIGINT and SIGTERM reach it
/// as the group's graceful shutdown. The stop itself stays a ``StopRequest`` flag: the bundle
/// reader checks it in libarchive's read callback, on a thread outside the task tree.
final class RunService: Service {
    let worker: Worker
    let logger: Logger
    /// The run's summary and exit status, once it has ended.
    let outcome = Mutex<(RunSummary, ExitStatus)?>(nil)

    init(worker: Worker, logger: Logger) {
        self.worker = worker
        self.logger = logger
    }

    func run() async {
        let (stop, logger) = (worker.options.stop, logger)
        let result = await withGracefulShutdownHandler {
            await worker.run()
        } onGracefulShutdown: {
            logger.notice(
                "signal received: finishing the steps in flight, then giving bundles back",
                metadata: ["grace_seconds": "\(stop.grace / .seconds(1))"])
            stop.request()
        }
        outcome.withLock { $0 = result }
    }
}
