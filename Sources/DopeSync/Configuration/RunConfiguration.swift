import Foundation
import Logging
import NIOSSL

/// `dopesync run`'s settings, resolved from (highest first) the command line, the environment,
/// a job file and the built-in defaults, in the order docs/job-file.md gives.
///
/// The lookups go through swift-configuration's snapshots (an in-memory provider for the parsed
/// options, `EnvironmentVariablesProvider`, a `YAMLSnapshot` of the job file), one source at a
/// time, so every error can name the source to edit. Yams (which swift-configuration parses YAML with)
/// lists the file's keys first: swift-configuration only answers for keys it is asked about, and
/// an operator's typo (`concurency: 8`) must be an error, not a silently ignored line.
public struct RunConfiguration: Sendable, CustomStringConvertible {
    public enum ProgressMode: String, Sendable, CaseIterable { case auto, always, never }
    public enum LogFormat: String, Sendable, CaseIterable { case text, json }

    /// What the command needs: `run` needs the API and its token; `status`, `requeue` and `prune`
    /// need only the spool (but still refuse a job file with mistakes in it).
    public enum Purpose: Sendable { case run, spoolOnly }

    public var spool = "./spool"
    public var apiURL = ""
    /// The bearer token. Never printed: `description` and the log metadata leave it out.
    public var token = ""
    public var concurrency = 4
    public var maxBundles: Int?
    public var maxTime: Duration?
    public var minAge: Duration = .seconds(5)
    public var progress = ProgressMode.auto
    public var logFormat = LogFormat.text
    public var logLevel = Logger.Level.info
    /// How long `prune` keeps a bundle in done/ when not told (`prune-after`).
    public var pruneAfter: Duration = .seconds(30 * 86_400)
    /// The free space the spool's file system must keep (`min-free-space`).
    public var minFreeSpace = FreeSpaceFloor.default
    /// Where a fresh token comes from after a refusal: the token file, the token command, or
    /// nowhere (the environment's).
    public var tokenSource = Credential.Source.fixed
    public var metricsFile: String?
    /// PEM file of CA certificates trusted besides the system's, checked to hold at least one.
    public var caFile: String?
    /// The proxy to the API, after the `proxy` setting, `https_proxy` & co. and `no_proxy`.
    public var proxy = ProxyChoice.direct
    /// The cap on the run's upload rate, in bytes per second.
    public var maxRate: Int64?
    /// The shared store of several hosts (`database`), with its password and lease; nil: the
    /// SQLite file in the spool.
    public var database: DatabaseSettings?
    /// Where each given setting came from, by key (the token's source under `token`).
    public var sources: [String: SettingSource] = [:]
    /// Things an operator should fix that do not stop the run (a token file others can read).
    public var warnings: [String] = []

    public init() {}

    /// Resolves the settings. `commandLine` holds the options the user typed, by setting key,
    /// as typed; `jobFile` is `--job`'s path.
    public static func resolve(
        commandLine: [RunSetting: String] = [:],
        environment: [String: String],
        jobFile: String?,
        purpose: Purpose = .run
    ) throws(ConfigurationError) -> RunConfiguration {
        var layers = [SettingLayer.commandLine(commandLine), .environment(environment)]
        if let jobFile { layers.append(try .jobFile(path: jobFile)) }
        var settings = SettingResolver(layers: layers)
        var configuration = RunConfiguration()
        try configuration.resolveSpoolSettings(&settings)
        try configuration.resolveDatabase(&settings, environment: environment)
        if purpose == .run {
            try configuration.resolveAPISettings(&settings, environment: environment, jobFile: jobFile)
        } else if let api = try? settings.parsed(.api, expected: "an http:// or https:// URL", Self.apiURL) {
            // Named for what the other commands show (the API a bundle's checkpoints belong to),
            // never used to send anything: no check of the scheme, no credential read.
            configuration.apiURL = api
        }
        configuration.sources.merge(settings.sources) { own, _ in own }
        return configuration
    }

    /// Where a run refused by its settings (a mistake in the job file, a token that cannot be
    /// read) still reports to: the spool and the metrics file, each from the first place that
    /// names it (the command line, the environment, then the job file read as far as it can be),
    /// whatever is wrong with the other settings. Nil without a metrics file: the alerts that
    /// read it would otherwise see the last run's exit code, not this one's.
    public static func reportingPlaces(
        commandLine: [RunSetting: String], environment: [String: String], jobFile: String?
    ) -> (spool: String, metricsFile: String)? {
        func named(_ setting: RunSetting) -> String? {
            givenText(of: setting, commandLine: commandLine, environment: environment, jobFile: jobFile)
        }
        guard let metricsFile = named(.metricsFile) else { return nil }
        return (named(.spool) ?? RunConfiguration().spool, metricsFile)
    }

    /// The text a setting was given, as the first place that names it gives it (the command
    /// line, the environment, the job file read as far as it can be), before any check of it.
    public static func givenText(
        of setting: RunSetting, commandLine: [RunSetting: String], environment: [String: String], jobFile: String?
    ) -> String? {
        let job = jobFile.flatMap { try? JobFileKeys.scalars(path: $0) } ?? [:]
        return [commandLine[setting], environment[setting.environmentVariable], job[setting.key]]
            .compactMap { $0 }.first { !$0.isEmpty }
    }

    /// What every command needs: the spool and how a run behaves and logs.
    private mutating func resolveSpoolSettings(_ settings: inout SettingResolver) throws(ConfigurationError) {
        if let spool = try settings.parsed(.spool, expected: "a folder path", { $0.isEmpty ? nil : $0 }) {
            self.spool = spool
        }
        if let concurrency = try settings.parsed(
            .concurrency, expected: "a whole number from 1 to 64",
            { Int($0).flatMap { (1...64).contains($0) ? $0 : nil } })
        {
            self.concurrency = concurrency
        }
        maxBundles = try settings.parsed(.maxBundles, expected: "a whole number of bundles, 0 or more") {
            Int($0).flatMap { $0 >= 0 ? $0 : nil }
        }
        let duration = "a duration (\(DurationText.examples))"
        maxTime = try settings.parsed(.maxTime, expected: duration, DurationText.parse)
        if let minAge = try settings.parsed(.minAge, expected: duration, DurationText.parse) { self.minAge = minAge }
        if let progress = try settings.parsed(
            .progress, expected: "auto, always or never", ProgressMode.init(rawValue:))
        {
            self.progress = progress
        }
        if let format = try settings.parsed(.logFormat, expected: "text or json", LogFormat.init(rawValue:)) {
            logFormat = format
        }
        if let keep = try settings.parsed(
            .pruneAfter, expected: "a duration above zero (\(DurationText.examples))",
            { DurationText.parse($0).flatMap { $0 > .zero ? $0 : nil } })
        {
            pruneAfter = keep
        }
        if let floor = try settings.parsed(
            .minFreeSpace, expected: "a size (1GiB, 500MB), a percentage (5%) or 0", FreeSpaceFloor.parse)
        {
            minFreeSpace = floor
        }
        if let level = try settings.parsed(
            .logLevel, expected: "trace, debug, info, notice, warning, error or critical",
            { Logger.Level(rawValue: $0.lowercased()) })
        {
            logLevel = level
        }
    }

    /// What `run` needs besides: the API, its credential, and the way there.
    private mutating func resolveAPISettings(
        _ settings: inout SettingResolver, environment: [String: String], jobFile: String?
    ) throws(ConfigurationError) {
        // Not checked for a folder that exists: monitoring that is not set up yet must never
        // stop uploads. A file that cannot be written is logged by the run.
        metricsFile = try settings.parsed(.metricsFile, expected: "a file path") { $0.isEmpty ? nil : $0 }
        try resolveAPIURL(&settings, jobFile: jobFile)
        try resolveCredential(&settings, environment: environment, jobFile: jobFile)
        maxRate = try settings.parsed(.maxRate, expected: "a rate (\(ByteRate.examples))", ByteRate.parse)
        if let (path, source) = try settings.lookup(.caFile) {
            try Self.checkCAFile(path, source: source)
            caFile = path
        }
        // The proxy's text may hold a password: never through `parsed`, which echoes values.
        let (proxy, proxySource) = try ProxyChoice.resolve(
            apiURL: apiURL, setting: settings.lookup(.proxy), environment: environment)
        self.proxy = proxy
        sources[RunSetting.proxy.key] = proxySource
        try checkPlainHTTPRoute(&settings, proxySource: proxySource)
    }

    /// A plain-http API on this machine needs no `allow-insecure-http` only while the whole route
    /// is on this machine: a proxy on another one would receive the token, and every record, in
    /// clear.
    private mutating func checkPlainHTTPRoute(_ settings: inout SettingResolver, proxySource: SettingSource?)
        throws(ConfigurationError)
    {
        guard URL(string: apiURL)?.scheme?.lowercased() == "http", Self.plainHTTPHost(apiURL) == nil,
            let proxy = proxy.proxy,
            let proxyHost = Self.plainHTTPHost("http://\(proxy.host.contains(":") ? "[\(proxy.host)]" : proxy.host)/")
        else { return }
        let allowInsecure = try settings.parsed(.allowInsecureHTTP, expected: "true or false", Self.boolean) ?? false
        let route =
            "\(MaskedURL.string(apiURL)) is plain http to this machine, but through the proxy \(proxy) on \(proxyHost), "
            + "which is not"
        guard allowInsecure else {
            throw ConfigurationError(
                .insecureAPI, key: RunSetting.proxy.key, source: proxySource ?? .builtInDefault,
                message: "\(route): the token would travel in clear to it; give `proxy: none` (or a proxy on this "
                    + "machine), use https://, or set allow-insecure-http: true if the network is trusted")
        }
        warnings.append(
            "\(route) (allow-insecure-http: true): the token and every record travel in clear to the proxy")
    }

    /// The API's URL; plain http only to this machine, or where `allow-insecure-http` says the
    /// network is trusted.
    private mutating func resolveAPIURL(_ settings: inout SettingResolver, jobFile: String?)
        throws(ConfigurationError)
    {
        guard let api = try settings.parsed(.api, expected: "an http:// or https:// URL", Self.apiURL) else {
            throw ConfigurationError(
                .missing, key: RunSetting.api.key,
                source: jobFile.map { .jobFile(path: $0, line: nil) } ?? .builtInDefault,
                message:
                    "the API's URL is not set: give --api, \(RunSetting.api.environmentVariable) or `api:` in a job file"
            )
        }
        apiURL = api
        let allowInsecure = try settings.parsed(.allowInsecureHTTP, expected: "true or false", Self.boolean) ?? false
        guard let host = Self.plainHTTPHost(api) else { return }
        guard allowInsecure else {
            throw ConfigurationError(
                .insecureAPI, key: RunSetting.api.key,
                source: settings.sources[RunSetting.api.key] ?? .builtInDefault,
                message: "\(MaskedURL.string(api)) is plain http to \(host), which is not this machine: the token "
                    + "would travel in clear; use https://, or set allow-insecure-http: true if the network is trusted"
            )
        }
        warnings.append(
            "the API URL \(MaskedURL.string(api)) is plain http to \(host) (allow-insecure-http: true): "
                + "the token and every record travel in clear; anyone on the path can read and replay them")
    }

    /// A CA file must hold at least one PEM certificate: a typo in its path, or a DER file,
    /// would otherwise show up later as every request refused for an untrusted certificate.
    private static func checkCAFile(_ path: String, source: SettingSource) throws(ConfigurationError) {
        // The file's own trouble first, in words: NIOSSL says only `failedToLoadCertificate`.
        if access(path, R_OK) != 0 {
            let why =
                errno == ENOENT
                ? "no such file" : errno == EACCES ? "permission denied" : String(cString: strerror(errno))
            throw ConfigurationError(
                .unreadableCAFile, key: RunSetting.caFile.key, source: source,
                message: "cannot read CA certificates from \(path): \(why)")
        }
        let certificates: [NIOSSLCertificate]
        do {
            certificates = try NIOSSLCertificate.fromPEMFile(path)
        } catch {
            let why = FileManager.default.isReadableFile(atPath: path) ? "it holds no PEM certificate" : "\(error)"
            throw ConfigurationError(
                .unreadableCAFile, key: RunSetting.caFile.key, source: source,
                message: "cannot read CA certificates from \(path): \(why)")
        }
        guard !certificates.isEmpty else {
            throw ConfigurationError(
                .unreadableCAFile, key: RunSetting.caFile.key, source: source,
                message: "cannot read CA certificates from \(path): it holds no PEM certificate")
        }
    }

    /// `true`/`false` as YAML and people write them.
    static func boolean(_ text: String) -> Bool? {
        switch text.lowercased() {
        case "true", "yes", "on", "1": true
        case "false", "no", "off", "0": false
        default: nil
        }
    }

    /// The host of an `http://` URL that is not loopback (127.0.0.0/8, ::1, localhost); nil for
    /// https, or for loopback, where nothing leaves the machine.
    static func plainHTTPHost(_ text: String) -> String? {
        guard let url = URL(string: text), url.scheme?.lowercased() == "http", let host = url.host?.lowercased()
        else { return nil }
        let bare = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        if bare == "localhost" || bare.hasSuffix(".localhost") || bare == "::1" { return nil }
        let octets = bare.split(separator: ".")
        if octets.count == 4, octets.allSatisfy({ UInt8($0) != nil }), octets[0] == "127" { return nil }
        return host
    }

    static func apiURL(_ text: String) -> String? {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
            let host = url.host, !host.isEmpty
        else { return nil }
        return text
    }

    /// For the log line a run starts with: the settings and, for those not defaulted, where they
    /// came from; never the token itself.
    public var description: String {
        var parts: [(key: String, value: String)] = [
            ("spool", spool), ("api", MaskedURL.string(apiURL)), ("concurrency", "\(concurrency)"),
            ("min-age", "\(minAge)"),
        ]
        if let maxBundles { parts.append(("max-bundles", "\(maxBundles)")) }
        if let maxTime { parts.append(("max-time", "\(maxTime)")) }
        if let metricsFile { parts.append(("metrics-file", metricsFile)) }
        if let caFile { parts.append(("ca-file", caFile)) }
        if case .through = proxy { parts.append(("proxy", "\(proxy)")) }
        if let maxRate { parts.append(("max-rate", ByteRate.text(Double(maxRate)))) }
        if let database { parts.append(("database", database.url)) }
        parts.append(("token", "<redacted>"))
        return parts.map { part in "\(part.key)=\(part.value)" + (sources[part.key].map { " (\($0))" } ?? "") }.joined(
            separator: ", ")
    }
}
