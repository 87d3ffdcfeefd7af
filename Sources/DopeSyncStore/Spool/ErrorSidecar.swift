import Crypto
import DopeSyncBundle
import DopeSyncSupport
import Foundation

/// `failed/NAME.error`: why a bundle needs a person. Plain text, one `key: value` a line, for people and
/// for grep:
///
/// ```
/// bundle: range-2024-05-01.tar.gz
/// session: 6F1C...
/// failed_at: 2024-05-01T12:00:00Z
/// reason: http_422
/// step: dope:0B2E...
/// http_status: 422
/// field: dope[2].ammunitionId
/// message: ammunitionId: unknown_reference (was 999)
/// attempts: 0
/// first_seen: 2024-05-01T11:59:58Z
/// ```
///
/// Keys without a value are left out. Values are one line each: a backslash is written `\\`, a newline
/// `\n`, a carriage return `\r`, any other control character `\xNN` (ESC is `\x1b`), so a multi-line
/// server message stays on its line and nothing in a name or message can drive a terminal. Times are ISO 8601 UTC.
/// The parser keeps keys it does not know in ``otherFields`` (a newer dopesync may add some).
public struct ErrorSidecar: Sendable, Hashable {
    /// The bundle's name in `failed/` (set by the move, which may add a suffix).
    public var bundle: String
    public var session: String?
    public var failedAt: Date
    /// A short code: `invalid_session`, `changed_after_upload`, `http_422`, `gave_up`, ...
    public var reason: FailureReason
    public var step: String?
    public var httpStatus: Int?
    /// The bundle's field or entry at fault, when one is (`dope[2].ammunitionId`).
    public var field: String?
    public var message: String?
    public var attempts: Int?
    public var firstSeen: Date?
    /// Keys this version does not know, as read.
    public var otherFields: [String: String] = [:]

    public init(
        bundle: String, session: String? = nil, failedAt: Date, reason: FailureReason, step: String? = nil,
        httpStatus: Int? = nil, field: String? = nil, message: String? = nil, attempts: Int? = nil,
        firstSeen: Date? = nil
    ) {
        self.bundle = bundle
        self.session = session
        self.failedAt = failedAt
        self.reason = reason
        self.step = step
        self.httpStatus = httpStatus
        self.field = field
        self.message = message
        self.attempts = attempts
        self.firstSeen = firstSeen
    }

    /// A sidecar from a failure as the checkpoint store keeps it.
    public init(
        bundle: String, session: String?, failedAt: Date, failure: BundleFailure, attempts: Int? = nil,
        firstSeen: Date? = nil
    ) {
        self.init(
            bundle: bundle, session: session, failedAt: failedAt, reason: failure.reason, step: failure.step,
            httpStatus: failure.httpStatus, field: failure.field, message: failure.message, attempts: attempts,
            firstSeen: firstSeen)
    }

    /// The failure it describes.
    public var failure: BundleFailure {
        BundleFailure(reason: reason, step: step, httpStatus: httpStatus, field: field, message: message)
    }

    /// The file's text, each line ending in a newline.
    public func rendered() -> String {
        var fields: [(String, String?)] = [
            ("bundle", bundle),
            ("session", session),
            ("failed_at", Self.format(failedAt)),
            ("reason", reason.rawValue),
            ("step", step),
            ("http_status", httpStatus.map(String.init)),
            ("field", field),
            ("message", message),
            ("attempts", attempts.map(String.init)),
            ("first_seen", firstSeen.map(Self.format)),
        ]
        fields += otherFields.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        return fields.compactMap { key, value in value.map { "\(key): \(Self.escape($0))\n" } }.joined()
    }

    /// Reads a sidecar's text. Nil when a required key (`bundle`, `failed_at`, `reason`) is missing or
    /// unreadable; unknown keys and lines without `: ` are tolerated.
    public init?(parsing text: String) {
        var values: [String: String] = [:]
        // Split on "\n" only (and drop a "\r" before it): other Unicode line breaks are part of a value.
        // (On scalars: as Characters, "\r\n" is one grapheme that contains no "\n" Character.)
        for scalars in text.unicodeScalars.split(separator: "\n") {
            var line = String(String.UnicodeScalarView(scalars))
            if line.unicodeScalars.last == "\r" { line.unicodeScalars.removeLast() }
            guard
                let separator = line.range(of: ": ")
                    ?? (line.hasSuffix(":") ? line.range(of: ":", options: .backwards) : nil)
            else { continue }
            let key = String(line[..<separator.lowerBound]).trimmingCharacters(in: .whitespaces)
            values[key] = Self.unescape(String(line[separator.upperBound...]))
        }
        guard let bundle = values.removeValue(forKey: "bundle"),
            let failedAt = values.removeValue(forKey: "failed_at").flatMap(Self.parseDate),
            let reason = values.removeValue(forKey: "reason")
        else { return nil }
        self.init(bundle: bundle, failedAt: failedAt, reason: FailureReason(rawValue: reason))
        session = values.removeValue(forKey: "session")
        step = values.removeValue(forKey: "step")
        httpStatus = values.removeValue(forKey: "http_status").flatMap { Int($0) }
        field = values.removeValue(forKey: "field")
        message = values.removeValue(forKey: "message")
        attempts = values.removeValue(forKey: "attempts").flatMap { Int($0) }
        firstSeen = values.removeValue(forKey: "first_seen").flatMap(Self.parseDate)
        otherFields = values
    }

    /// Reads `failed/NAME.error`, or nil if it is missing or not a sidecar. At most
    /// ``maxBytes``: a sidecar is a few lines, and a producer's bundle may be named `*.error`.
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public static func read(from path: String) -> ErrorSidecar? {
        // Never through a link, never waiting on a FIFO: a producer names its bundles.
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        guard let data = try? handle.read(upToCount: maxBytes + 1), data.count <= maxBytes else { return nil }
        return ErrorSidecar(parsing: String(decoding: data, as: UTF8.self))
    }

    /// The most a sidecar holds (a server's message is cut long before).
    static let maxBytes = 64 * 1024

    static func format(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle())
    }

    /// Nil for text that is not an ISO 8601 instant: the caller says which key was wrong.
    static func parseDate(_ text: String) -> Date? {
        try? Date.ISO8601FormatStyle().parse(text)
    }

    static func escape(_ value: String) -> String {
        var out = ""
        out.reserveCapacity(value.utf8.count)
        for character in value.unicodeScalars {
            switch character {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case let control where DisplayText.isControl(control) || DisplayText.isFormat(control):
                out += DisplayText.escaped(String(control))
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }

    static func unescape(_ value: String) -> String {
        var out = ""
        var escaping = false
        var scalars = value.unicodeScalars[...]
        while let character = scalars.popFirst() {
            if escaping {
                switch character {
                case "n": out += "\n"
                case "r": out += "\r"
                case "x":
                    // `\xNN`: a control character (``DisplayText``); anything else stays as written.
                    let digits = String(String.UnicodeScalarView(scalars.prefix(2)))
                    if digits.count == 2, let byte = UInt8(digits, radix: 16) {
                        out.unicodeScalars.append(Unicode.Scalar(byte))
                        scalars = scalars.dropFirst(2)
                    } else {
                        out += "\\x"
                    }
                case "u":
                    // `\u{NNNN}`: an invisible format character (``DisplayText``).
                    let braced = scalars.prefix(while: { $0 != "}" })
                    let digits = String(String.UnicodeScalarView(braced.dropFirst()))
                    if braced.first == "{", braced.count < scalars.count, let value = UInt32(digits, radix: 16),
                        let scalar = Unicode.Scalar(value)
                    {
                        out.unicodeScalars.append(scalar)
                        scalars = scalars.dropFirst(braced.count + 1)
                    } else {
                        out += "\\u"
                    }
                default: out.unicodeScalars.append(character)
                }
                escaping = false
            } else if character == "\\" {
                escaping = true
            } else {
                out.unicodeScalars.append(character)
            }
        }
        if escaping { out += "\\" }
        return out
    }
}

extension ErrorSidecar {
    /// What a sidecar's name ends in.
    public static let suffix = ".error"
}

extension Spool {
    /// The sidecar path of a bundle in `failed/`.
    public func sidecarPath(forFailed name: String) -> String { path(.failed, Self.sidecarName(forFailed: name)) }

    /// `NAME.error`, or for a name too long for that (a file name has at most 255 bytes), the
    /// name cut to fit, `~`, 16 hex digits of its SHA-256, and `.error`: still one per bundle, and
    /// the sidecar's `bundle:` line names the bundle in full.
    public static func sidecarName(forFailed name: String) -> String {
        let plain = name + ErrorSidecar.suffix
        guard plain.utf8.count > FileSystem.maxNameBytes else { return plain }
        let tag = "~" + String(Array(SHA256.hash(data: Array(name.utf8))).hexString.prefix(16)) + ErrorSidecar.suffix
        return SpoolNames.leading(name, bytes: FileSystem.maxNameBytes - tag.utf8.count) + tag
    }
}
