/// The exit codes (docs/exit-codes.md; sysexits.h), named once and used everywhere.
public struct ExitStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The run finished and no bundle went to `failed/` (also: nothing to do).
    public static let success = ExitStatus(rawValue: 0)
    /// The run finished and at least one bundle went to `failed/`.
    public static let bundlesFailed = ExitStatus(rawValue: 1)
    /// Bad command line (EX_USAGE).
    public static let usage = ExitStatus(rawValue: 64)
    /// `inspect`/`pack`: the bundle or session is invalid (EX_DATAERR).
    public static let invalidData = ExitStatus(rawValue: 65)
    /// The spool cannot be created or written (EX_CANTCREAT).
    public static let cannotCreate = ExitStatus(rawValue: 73)
    /// The API was unreachable or kept failing; bundles deferred (EX_TEMPFAIL).
    public static let temporaryFailure = ExitStatus(rawValue: 75)
    /// The API's TLS certificate could not be trusted, or TLS could not be agreed; bundles given
    /// back (EX_PROTOCOL). Not among the contract's first codes: not an outage (75), since retrying cannot help.
    public static let apiNotTrusted = ExitStatus(rawValue: 76)
    /// The API refused the credentials (EX_NOPERM).
    public static let permissionDenied = ExitStatus(rawValue: 77)
    /// The job file or configuration is invalid (EX_CONFIG).
    public static let configuration = ExitStatus(rawValue: 78)
    /// An internal error: dopesync itself is wrong (EX_SOFTWARE). Never expected.
    public static let software = ExitStatus(rawValue: 70)

    public var description: String { String(rawValue) }

    /// Every code a command exits with, for the reference docs' test.
    public static let all: [ExitStatus] = [
        .success, .bundlesFailed, .usage, .invalidData, .software, .cannotCreate, .temporaryFailure, .apiNotTrusted,
        .permissionDenied, .configuration,
    ]
}

/// What a command has to say and how the process should end; the executable prints and exits.
public struct CommandOutcome: Sendable {
    public var output: String
    /// Printed to standard error (diagnostics), when any.
    public var diagnostics: String?
    public var status: ExitStatus

    public init(output: String, diagnostics: String? = nil, status: ExitStatus) {
        self.output = output
        self.diagnostics = diagnostics
        self.status = status
    }
}
