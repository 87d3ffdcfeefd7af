import Foundation

/// One setting of `dopesync run`: its job-file key (the option's name without `--`), its
/// environment variable, and what it means. The README's table of keys is this list.
public struct RunSetting: Sendable, Hashable, CustomStringConvertible {
    /// The job-file key and the command-line option's name, e.g. `max-time`.
    public let key: String
    /// The environment variable that overrides the job file, e.g. `DOPESYNC_MAX_TIME`.
    public let environmentVariable: String
    /// One line for the README and for error messages.
    public let help: String

    public var description: String { key }

    init(_ key: String, environment: String? = nil, help: String) {
        self.key = key
        self.environmentVariable =
            environment ?? "DOPESYNC_" + key.uppercased().replacingOccurrences(of: "-", with: "_")
        self.help = help
    }
}

extension RunSetting {
    public static let spool = RunSetting("spool", help: "the spool folder (default ./spool)")
    /// The contract names this variable `DOPESYNC_API_URL`, not `DOPESYNC_API`.
    public static let api = RunSetting(
        "api", environment: "DOPESYNC_API_URL", help: "the API's base URL, http or https (required)")
    public static let tokenFile = RunSetting("token-file", help: "a file whose only content is the API token")
    public static let tokenCommand = RunSetting(
        "token-command",
        help: "a command whose first line of output is the API token, run at the start and after a refusal "
            + "(at most once a minute); instead of token-file")
    public static let tokenCommandEnvironment = RunSetting(
        "token-command-environment",
        help: "the environment variables the token command gets besides PATH, HOME and the locale's, by name, "
            + "comma-separated (never the token, the database password or a proxy's)")
    public static let concurrency = RunSetting("concurrency", help: "bundles uploaded at once, 1 to 64 (default 4)")
    public static let maxBundles = RunSetting(
        "max-bundles", help: "claim at most this many bundles in one run (default: no limit)")
    public static let maxTime = RunSetting(
        "max-time", help: "stop claiming after this long, e.g. 10m (default: no limit)")
    public static let minAge = RunSetting(
        "min-age", help: "claim only bundles unmodified for this long; 0 turns it off (default 5s)")
    public static let progress = RunSetting(
        "progress", help: "auto (a live line on a terminal), always or never (default auto)")
    public static let logFormat = RunSetting("log-format", help: "text or json (default text)")
    public static let logLevel = RunSetting(
        "log-level", help: "trace, debug, info, notice, warning, error or critical (default info)")
    public static let metricsFile = RunSetting(
        "metrics-file", help: "write a Prometheus textfile here after each run (default: none)")

    public static let caFile = RunSetting(
        "ca-file", help: "a PEM file of CA certificates trusted for the API besides the system's (default: none)")
    public static let proxy = RunSetting(
        "proxy",
        help: "reach the API through this http://[user:password@]host:port proxy, or none "
            + "(default: https_proxy, http_proxy, all_proxy and no_proxy, as curl reads them)")
    public static let maxRate = RunSetting(
        "max-rate", help: "cap the whole run's upload rate, e.g. 500KiB/s or 2MB/s (default: no cap)")
    public static let pruneAfter = RunSetting(
        "prune-after", help: "how long `prune` keeps a bundle in done/, e.g. 30d (default 30d)")
    public static let minFreeSpace = RunSetting(
        "min-free-space",
        help: "claim nothing while the spool's file system has less free, a size (1GiB, 500MB) or a percentage (5%) "
            + "(default 1GiB; 0 turns it off)")
    public static let allowInsecureHTTP = RunSetting(
        "allow-insecure-http",
        help: "true: allow an http:// API URL that is not loopback, although the token then travels in clear "
            + "(default false: only https://, or http:// to 127.0.0.1, ::1 or localhost)")

    /// Every key a job file may hold, in the order the README documents them.
    public static let all: [RunSetting] = [
        .spool, .api, .tokenFile, .tokenCommand, .tokenCommandEnvironment, .concurrency, .maxBundles, .maxTime, .minAge,
        .progress, .logFormat,
        .logLevel,
        .metricsFile,
        .caFile, .proxy, .maxRate, .minFreeSpace, .pruneAfter, .allowInsecureHTTP, .database, .databasePasswordFile,
        .lease,
    ]

    /// The token itself comes only from the environment (or from `token-file`), never from a job
    /// file, so job files can be committed and read by anyone.
    public static let tokenEnvironmentVariable = "DOPESYNC_API_TOKEN"
}

/// Where a setting's value came from; errors name it so the operator knows what to edit.
public enum SettingSource: Sendable, Hashable, CustomStringConvertible {
    case commandLine
    case environment(variable: String)
    case jobFile(path: String, line: Int?)
    case builtInDefault

    public var description: String {
        switch self {
        case .commandLine: "the command line"
        case .environment(let variable): "the environment variable \(variable)"
        case .jobFile(let path, let line?): "\(path):\(line)"
        case .jobFile(let path, nil): path
        case .builtInDefault: "the built-in default"
        }
    }
}

/// Why the configuration cannot be used (exit 78, or 64 when the culprit is the command line).
public struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// A job file names a key that no setting has (a typo, usually).
        public static let unknownKey = Code(rawValue: "unknown_key")
        /// A value is a list or a mapping where one value belongs.
        public static let wrongType = Code(rawValue: "wrong_type")
        /// A value has the right shape but is not allowed (not a number, not a duration, …).
        public static let badValue = Code(rawValue: "bad_value")
        /// A required setting (the API URL, the token) is given nowhere.
        public static let missing = Code(rawValue: "missing_setting")
        /// The job file cannot be read or is not YAML.
        public static let unreadableJobFile = Code(rawValue: "unreadable_job_file")
        /// The token file cannot be read or is empty.
        public static let unreadableTokenFile = Code(rawValue: "unreadable_token_file")
        /// The CA file cannot be read or holds no PEM certificate.
        public static let unreadableCAFile = Code(rawValue: "unreadable_ca_file")
        /// The token command failed, timed out or printed no token (exit 77: no credential).
        public static let tokenCommandFailed = Code(rawValue: "token_command_failed")
        /// An `http://` API URL that is not loopback, without `allow-insecure-http: true`.
        public static let insecureAPI = Code(rawValue: "insecure_api_url")
    }

    public let code: Code
    /// The job-file key (or option) at fault, when there is one.
    public let key: String?
    public let source: SettingSource
    public let message: String

    public init(_ code: Code, key: String?, source: SettingSource, message: String) {
        self.code = code
        self.key = key
        self.source = source
        self.message = message
    }

    /// `jobs/production.yaml:7: concurency: unknown key (did you mean concurrency?) [unknown_key]`
    public var description: String {
        let place: String =
            switch source {
            case .jobFile: "\(source): "
            case .environment, .commandLine, .builtInDefault: ""
            }
        let culprit = key.map { "\($0): " } ?? ""
        let origin: String =
            switch source {
            case .environment, .commandLine: " (from \(source))"
            case .jobFile, .builtInDefault: ""
            }
        return "\(place)\(culprit)\(message)\(origin) [\(code)]"
    }

    /// A bad value typed on the command line is a usage error (64); everything else, an
    /// unreadable token file named on the command line included, is a configuration error (78).
    public var exitStatus: ExitStatus {
        if code == .tokenCommandFailed { return .permissionDenied }
        return source == .commandLine && (code == .badValue || code == .wrongType) ? .usage : .configuration
    }
}
