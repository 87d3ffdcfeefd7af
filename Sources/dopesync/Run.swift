import ArgumentParser
import DopeSync
import Foundation
import Logging

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upload what is due in the spool's incoming/ (and orphans in processing/), then exit.",
        discussion: """
            One batch, for cron or a systemd timer. Exit codes: 0 done (nothing failed), 1 a bundle \
            went to failed/, 73 spool unusable, 75 API unreachable or kept failing, 77 credentials \
            refused. Environment: DOPESYNC_API_URL, DOPESYNC_API_TOKEN (the token is never printed).
            """
    )

    @Option(help: "The spool folder.")
    var spool = "./spool"

    @Option(help: "The API's base URL (default: $DOPESYNC_API_URL).")
    var api: String?

    @Option(help: "A file holding the API token (default: $DOPESYNC_API_TOKEN).")
    var tokenFile: String?

    @Option(help: "Bundles uploaded at once.")
    var concurrency = 4

    @Option(help: "Claim at most this many bundles.")
    var maxBundles: Int?

    @Option(help: "Stop claiming after this long (e.g. 90s, 10m, 1h).", transform: parseDuration)
    var maxTime: Duration?

    @Option(help: "Only bundles unmodified for this long (0 turns the guard off).", transform: parseDuration)
    var minAge: Duration = .seconds(5)

    @Option(help: "A live progress line: auto (on a terminal), always, never.")
    var progress: Progress = .auto

    enum Progress: String, ExpressibleByArgument { case auto, always, never }

    @Option(help: "Log lines as text or json.")
    var logFormat: LogFormat = .text

    enum LogFormat: String, ExpressibleByArgument { case text, json }

    func validate() throws {
        guard concurrency >= 1 else { throw ValidationError("--concurrency must be at least 1.") }
        if let maxBundles, maxBundles < 0 { throw ValidationError("--max-bundles must not be negative.") }
    }

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        guard let apiURL = api ?? environment["DOPESYNC_API_URL"], !apiURL.isEmpty else {
            throw ValidationError("Give the API's URL with --api or DOPESYNC_API_URL.")
        }
        let token: String
        if let tokenFile {
            guard let text = try? String(contentsOfFile: tokenFile, encoding: .utf8) else {
                throw ValidationError("Cannot read the token file \(tokenFile).")
            }
            token = text.trimmingCharacters(in: .whitespacesAndNewlines)
        } else if let value = environment["DOPESYNC_API_TOKEN"], !value.isEmpty {
            token = value
        } else {
            throw ValidationError("Give the API token with --token-file or DOPESYNC_API_TOKEN.")
        }

        let format = logFormat
        LoggingSystem.bootstrap { label in
            format == .json ? JSONLogHandler(label: label) as any LogHandler : StreamLogHandler.standardError(label: label)
        }
        var logger = Logger(label: "dopesync")
        logger.logLevel = .info
        var options = RunOptions(spoolRoot: spool, apiURL: apiURL, token: token)
        options.concurrency = concurrency
        options.maxBundles = maxBundles
        options.maxTime = maxTime
        options.minAge = minAge
        options.showProgress = progress == .always || (progress == .auto && isatty(STDERR_FILENO) == 1)

        // SIGINT/SIGTERM: stop claiming, let steps in flight finish (or time out), give back.
        let stop = options.stop
        let signalSources = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                logger.notice("signal received: finishing the steps in flight, then giving bundles back", metadata: ["signal": "\(number)"])
                stop.request()
            }
            source.resume()
            return source
        }
        defer { signalSources.forEach { $0.cancel() } }
        let (summary, status) = await Worker(options: options, logger: logger).run()
        print(summary.line)
        if status != .success { throw ExitCode(status.rawValue) }
    }
}

/// `90s`, `10m`, `1h`, `2d`, `500ms`, or plain seconds.
func parseDuration(_ text: String) throws -> Duration {
    let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400)]
    for (suffix, seconds) in units where text.hasSuffix(suffix) {
        if let value = Double(text.dropLast(suffix.count)), value >= 0 { return .milliseconds(Int64(value * seconds * 1000)) }
    }
    if let value = Double(text), value >= 0 { return .milliseconds(Int64(value * 1000)) }
    throw ValidationError("Not a duration: \(text) (use e.g. 500ms, 30s, 10m, 1h, 2d).")
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

    func log(event: LogEvent) {
        var fields: [String: String] = ["time": Date().formatted(.iso8601), "level": "\(event.level)", "message": "\(event.message)", "logger": label]
        for (key, value) in metadata.merging(event.metadata ?? [:], uniquingKeysWith: { $1 }) { fields[key] = "\(value)" }
        if let data = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys]) {
            FileHandle.standardError.write(data + Data("\n".utf8))
        }
    }
}
