import Configuration
import Foundation
import Logging
import NIOSSL
import Yams

/// `dopesync run`'s settings, resolved from (highest first) the command line, the environment,
/// a job file and the built-in defaults, as WORKER.md's "Configuration" orders them.
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

        var configuration = RunConfiguration()
        func lookup(_ setting: RunSetting) throws(ConfigurationError) -> (text: String, source: SettingSource)? {
            for layer in layers {
                if let found = try layer.value(of: setting) {
                    configuration.sources[setting.key] = found.source
                    return found
                }
            }
            return nil
        }
        func parsed<Value>(_ setting: RunSetting, expected: String, _ parse: (String) -> Value?)
            throws(ConfigurationError) -> Value?
        {
            guard let (text, source) = try lookup(setting) else { return nil }
            guard let value = parse(text.trimmingCharacters(in: .whitespaces)) else {
                // A URL may carry a password: shown masked, like every URL.
                let shown = setting == .api ? MaskedURL.string(text) : DisplayText.escaped(text)
                throw ConfigurationError(
                    .badValue, key: setting.key, source: source, message: "\"\(shown)\" is not \(expected)")
            }
            return value
        }

        if let spool = try parsed(.spool, expected: "a folder path", { $0.isEmpty ? nil : $0 }) {
            configuration.spool = spool
        }
        if let concurrency = try parsed(
            .concurrency, expected: "a whole number from 1 to 64",
            { Int($0).flatMap { (1...64).contains($0) ? $0 : nil } })
        {
            configuration.concurrency = concurrency
        }
        configuration.maxBundles = try parsed(.maxBundles, expected: "a whole number of bundles, 0 or more") {
            Int($0).flatMap { $0 >= 0 ? $0 : nil }
        }
        configuration.maxTime = try parsed(
            .maxTime, expected: "a duration (\(DurationText.examples))", DurationText.parse)
        if let minAge = try parsed(.minAge, expected: "a duration (\(DurationText.examples))", DurationText.parse) {
            configuration.minAge = minAge
        }
        if let progress = try parsed(.progress, expected: "auto, always or never", ProgressMode.init(rawValue:)) {
            configuration.progress = progress
        }
        if let format = try parsed(.logFormat, expected: "text or json", LogFormat.init(rawValue:)) {
            configuration.logFormat = format
        }
        if let keep = try parsed(
            .pruneAfter, expected: "a duration above zero (\(DurationText.examples))",
            { DurationText.parse($0).flatMap { $0 > .zero ? $0 : nil } })
        {
            configuration.pruneAfter = keep
        }
        if let floor = try parsed(
            .minFreeSpace, expected: "a size (1GiB, 500MB), a percentage (5%) or 0", FreeSpaceFloor.parse)
        {
            configuration.minFreeSpace = floor
        }
        if let level = try parsed(
            .logLevel, expected: "trace, debug, info, notice, warning, error or critical",
            { Logger.Level(rawValue: $0.lowercased()) })
        {
            configuration.logLevel = level
        }
        guard purpose == .run else { return configuration }

        // Not checked for a folder that exists: monitoring that is not set up yet must never
        // stop uploads. A file that cannot be written is logged by the run.
        configuration.metricsFile = try parsed(.metricsFile, expected: "a file path") { $0.isEmpty ? nil : $0 }

        guard let api = try parsed(.api, expected: "an http:// or https:// URL", Self.apiURL) else {
            throw ConfigurationError(
                .missing, key: RunSetting.api.key,
                source: jobFile.map { .jobFile(path: $0, line: nil) } ?? .builtInDefault,
                message:
                    "the API's URL is not set: give --api, \(RunSetting.api.environmentVariable) or `api:` in a job file"
            )
        }
        configuration.apiURL = api
        let allowInsecure =
            try parsed(.allowInsecureHTTP, expected: "true or false", Self.boolean) ?? false
        if let host = Self.plainHTTPHost(api) {
            guard allowInsecure else {
                throw ConfigurationError(
                    .insecureAPI, key: RunSetting.api.key,
                    source: configuration.sources[RunSetting.api.key] ?? .builtInDefault,
                    message: "\(MaskedURL.string(api)) is plain http to \(host), which is not this machine: the token "
                        + "would travel in clear; use https://, or set allow-insecure-http: true if the network is trusted"
                )
            }
            configuration.warnings.append(
                "the API URL \(MaskedURL.string(api)) is plain http to \(host) (allow-insecure-http: true): "
                    + "the token and every record travel in clear; anyone on the path can read and replay them")
        }
        let tokenFile = try lookup(.tokenFile)
        let tokenCommand = try lookup(.tokenCommand)
        if tokenFile?.source == .commandLine && tokenCommand?.source == .commandLine {
            throw ConfigurationError(
                .badValue, key: RunSetting.tokenCommand.key, source: .commandLine,
                message: "give --token-file or --token-command, not both")
        }
        if Self.hasEnvironmentToken(environment), let command = tokenCommand, command.source != .commandLine,
            tokenFile?.source != .commandLine
        {
            configuration.warnings.append(
                "\(RunSetting.tokenEnvironmentVariable) is used, not token-command (\(command.source)): a token from "
                    + "the environment cannot be renewed when the API refuses it")
        }
        if let command = tokenCommand,
            tokenFile?.source != .commandLine,
            command.source == .commandLine || !Self.hasEnvironmentToken(environment)
        {
            guard tokenFile == nil || command.source == .commandLine else {
                throw ConfigurationError(
                    .badValue, key: RunSetting.tokenCommand.key, source: command.source,
                    message: "give token-file or token-command, not both (token-file comes from \(tokenFile!.source))")
            }
            try configuration.resolveTokenCommand(command.text, source: command.source)
        } else {
            try configuration.resolveToken(tokenFile: tokenFile, environment: environment, jobFile: jobFile)
        }
        configuration.maxRate = try parsed(.maxRate, expected: "a rate (\(ByteRate.examples))", ByteRate.parse)
        if let (path, source) = try lookup(.caFile) {
            try Self.checkCAFile(path, source: source)
            configuration.caFile = path
        }
        // The proxy's text may hold a password: never through `parsed`, which echoes values.
        let (proxy, proxySource) = try ProxyChoice.resolve(
            apiURL: api, setting: lookup(.proxy), environment: environment)
        configuration.proxy = proxy
        configuration.sources[RunSetting.proxy.key] = proxySource
        return configuration
    }

    /// A CA file must hold at least one PEM certificate: a typo in its path, or a DER file,
    /// would otherwise show up later as every request refused for an untrusted certificate.
    private static func checkCAFile(_ path: String, source: SettingSource) throws(ConfigurationError) {
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

    /// The token: `--token-file` on the command line, else `DOPESYNC_API_TOKEN`, else a
    /// `token-file` from the environment or the job file.
    static func hasEnvironmentToken(_ environment: [String: String]) -> Bool {
        !(environment[RunSetting.tokenEnvironmentVariable]?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "")
            .isEmpty
    }

    /// Runs the token command once, for the token a run starts with; it runs again after a refusal.
    private mutating func resolveTokenCommand(_ command: String, source: SettingSource) throws(ConfigurationError) {
        do {
            token = try Credential.runTokenCommand(command)
        } catch {
            throw ConfigurationError(
                .tokenCommandFailed, key: RunSetting.tokenCommand.key, source: source, message: error.message)
        }
        tokenSource = .command(command)
        sources["token"] = source
    }

    private mutating func resolveToken(
        tokenFile: (text: String, source: SettingSource)?, environment: [String: String], jobFile: String?
    ) throws(ConfigurationError) {
        let fromEnvironment = environment[RunSetting.tokenEnvironmentVariable].map {
            $0.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        if let fromEnvironment, !fromEnvironment.isEmpty, tokenFile?.source != .commandLine {
            guard Credential.isUsableToken(fromEnvironment) else {
                throw ConfigurationError(
                    .badValue, key: nil, source: .environment(variable: RunSetting.tokenEnvironmentVariable),
                    message: Credential.unusableToken(RunSetting.tokenEnvironmentVariable))
            }
            if let tokenFile {
                warnings.append(
                    "\(RunSetting.tokenEnvironmentVariable) is used, not token-file (\(tokenFile.source)): a token from "
                        + "the environment cannot be read again when the API refuses it")
            }
            token = fromEnvironment
            tokenSource = .fixed
            sources["token"] = .environment(variable: RunSetting.tokenEnvironmentVariable)
            return
        }
        guard let (path, source) = tokenFile else {
            throw ConfigurationError(
                .missing, key: RunSetting.tokenFile.key,
                source: jobFile.map { .jobFile(path: $0, line: nil) } ?? .builtInDefault,
                message:
                    "the API token is not set: give --token-file, \(RunSetting.tokenEnvironmentVariable) or `token-file:` in a job file"
            )
        }
        let contents: [UInt8]
        do {
            contents = try FileSystem.readFile(path, maxBytes: 64 * 1024)
        } catch {
            // A path with no "/" that cannot be read may be the token itself, given by mistake:
            // never echo that into a log.
            let shown =
                path.contains("/")
                ? "\(error)"
                : "the file named by token-file (not shown: with no \"/\" it may be a token given by mistake)"
            throw ConfigurationError(
                .unreadableTokenFile, key: RunSetting.tokenFile.key, source: source,
                message: "cannot read the token file: \(shown)")
        }
        let text = String(decoding: contents, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty, !text.contains(where: \.isNewline) else {
            throw ConfigurationError(
                .unreadableTokenFile, key: RunSetting.tokenFile.key, source: source,
                message: "the token file \(path) must hold the token alone on one line")
        }
        guard Credential.isUsableToken(text) else {
            throw ConfigurationError(
                .unreadableTokenFile, key: RunSetting.tokenFile.key, source: source,
                message: Credential.unusableToken("the token file \(path)"))
        }
        token = text
        tokenSource = .file(path)
        sources["token"] = source
        // Only a warning: a file just read whose mode cannot be read is not worth refusing the run for.
        if let mode = (try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? Int,
            mode & 0o077 != 0
        {
            warnings.append(
                "the token file \(path) can be read by other users (mode \(String(mode, radix: 8))); chmod 600 it")
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
        parts.append(("token", "<redacted>"))
        return parts.map { part in "\(part.key)=\(part.value)" + (sources[part.key].map { " (\($0))" } ?? "") }.joined(
            separator: ", ")
    }
}

/// One source of settings, asked through a swift-configuration snapshot.
struct SettingLayer: Sendable {
    let snapshot: any ConfigSnapshot
    /// The provider's key for a setting.
    let key: @Sendable (RunSetting) -> AbsoluteConfigKey
    /// What to tell the operator a value came from.
    let source: @Sendable (RunSetting) -> SettingSource
    /// Keys written with no value (`max-bundles:`): "not set", like a missing line.
    var unsetKeys: Set<String> = []

    func value(of setting: RunSetting) throws(ConfigurationError) -> (text: String, source: SettingSource)? {
        guard !unsetKeys.contains(setting.key) else { return nil }
        let result: LookupResult
        do {
            result = try snapshot.value(forKey: key(setting), type: .string)
        } catch {
            throw ConfigurationError(
                .wrongType, key: setting.key, source: source(setting),
                message: "expected one value, not a list or a mapping")
        }
        guard case .string(let text)? = result.value?.content else { return nil }
        return (text, source(setting))
    }

    static func commandLine(_ options: [RunSetting: String]) -> SettingLayer {
        var values: [AbsoluteConfigKey: ConfigValue] = [:]
        for (setting, text) in options {
            values[AbsoluteConfigKey([setting.key])] = ConfigValue(.string(text), isSecret: false)
        }
        return SettingLayer(
            snapshot: InMemoryProvider(name: "command line", values: values).snapshot(),
            key: { AbsoluteConfigKey([$0.key]) }, source: { _ in .commandLine })
    }

    static func environment(_ variables: [String: String]) -> SettingLayer {
        // An empty variable (`DOPESYNC_API_URL=`) counts as not set, as it does for the shell's defaults.
        let provider = EnvironmentVariablesProvider(
            environmentVariables: variables.filter { !$0.value.isEmpty },
            secretsSpecifier: .specific([RunSetting.tokenEnvironmentVariable]))
        // The provider spells `dopesync.max.time` as DOPESYNC_MAX_TIME.
        return SettingLayer(
            snapshot: provider.snapshot(),
            key: { AbsoluteConfigKey($0.environmentVariable.lowercased().split(separator: "_").map(String.init)) },
            source: { .environment(variable: $0.environmentVariable) })
    }

    /// The job file is read once: Yams lists its keys, and its values are looked up in a
    /// `YAMLSnapshot` made from the same bytes.
    static func jobFile(path: String) throws(ConfigurationError) -> SettingLayer {
        let lines = try JobFileKeys.scan(path: path)
        let snapshot: any ConfigSnapshot
        if lines.keys.isEmpty {
            // An empty (or all-comment) job file is allowed.
            snapshot = InMemoryProvider(name: path, values: [:]).snapshot()
        } else {
            do {
                snapshot = try YAMLSnapshot(
                    data: lines.contents.span.bytes, providerName: path, parsingOptions: .default)
            } catch {
                throw ConfigurationError(
                    .unreadableJobFile, key: nil, source: .jobFile(path: path, line: nil),
                    message: "not valid YAML: \(error)")
            }
        }
        return SettingLayer(
            snapshot: snapshot, key: { AbsoluteConfigKey([$0.key]) },
            source: { .jobFile(path: path, line: lines.keys[$0.key]) },
            unsetKeys: lines.nullKeys)
    }
}

/// The keys of a job file with their line numbers, checked against the known settings.
struct JobFileKeys {
    /// Key → 1-based line.
    var keys: [String: Int] = [:]
    /// Keys written with no value (`max-bundles:`), which mean "not set", like a missing line.
    var nullKeys: Set<String> = []
    /// The file's bytes, for the values.
    var contents: [UInt8] = []

    static func scan(path: String) throws(ConfigurationError) -> JobFileKeys {
        let whole = SettingSource.jobFile(path: path, line: nil)
        var scanned = JobFileKeys()
        do {
            scanned.contents = try FileSystem.readFile(path, maxBytes: 1024 * 1024)
        } catch {
            throw ConfigurationError(
                .unreadableJobFile, key: nil, source: whole, message: "cannot read the job file: \(error)")
        }
        let root: Node?
        do {
            root = try Yams.compose(yaml: String(decoding: scanned.contents, as: UTF8.self))
        } catch {
            throw ConfigurationError(.unreadableJobFile, key: nil, source: whole, message: "not valid YAML: \(error)")
        }
        guard let root else { return scanned }
        guard let mapping = root.mapping else {
            throw ConfigurationError(
                .wrongType, key: nil, source: .jobFile(path: path, line: root.mark?.line),
                message: "a job file is a list of `key: value` lines")
        }
        let known = Set(RunSetting.all.map(\.key))
        for (keyNode, valueNode) in mapping {
            let line = keyNode.mark?.line
            let source = SettingSource.jobFile(path: path, line: line)
            guard let key = keyNode.string else {
                throw ConfigurationError(.wrongType, key: nil, source: source, message: "a key must be a plain name")
            }
            if key == "token" || key == "api-token" {
                throw ConfigurationError(
                    .unknownKey, key: key, source: source,
                    message:
                        "a job file never holds the token; put it in a file named by `token-file:` (mode 600) or in \(RunSetting.tokenEnvironmentVariable)"
                )
            }
            guard known.contains(key) else {
                let hint =
                    RunSetting.all.map(\.key).min { editDistance($0, key) < editDistance($1, key) }
                    .flatMap { editDistance($0, key) <= 2 ? " (did you mean \($0)?)" : nil }
                    ?? " (known keys: \(RunSetting.all.map(\.key).joined(separator: ", ")))"
                throw ConfigurationError(.unknownKey, key: key, source: source, message: "unknown key\(hint)")
            }
            switch valueNode {
            case .scalar:
                if valueNode.null != nil { scanned.nullKeys.insert(key) }
            case .mapping, .sequence, .alias:
                throw ConfigurationError(
                    .wrongType, key: key, source: source, message: "expected one value, not a list or a mapping")
            }
            scanned.keys[key] = line
        }
        return scanned
    }

    /// Levenshtein distance, for "did you mean" on short keys.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a)
        let b = Array(b)
        var previous = Array(0...b.count)  // distances from the first i characters of a
        for (i, character) in a.enumerated() {
            var current = [i + 1]
            for j in b.indices {
                current.append(min(previous[j + 1] + 1, current[j] + 1, previous[j] + (character == b[j] ? 0 : 1)))
            }
            previous = current
        }
        return previous[b.count]
    }
}
