/// Decodes and validates `session.json` against docs/bundle-format.md ("session.json" and
/// "Rules across the document"), reporting every problem of a document, not only the first.
///
/// Decisions the spec leaves open:
/// - `null` for an optional field means absent (clients write it); for a required field it is
///   `missing_field`.
/// - Integer fields take integer literals only: `1.5`, `1.0` and `1e2` are `wrong_type`; an
///   integer literal beyond 64 bits is `out_of_range`.
/// - "Characters" in `notes` are Unicode scalars, as JSON Schema's `maxLength` in docs/api.yaml
///   counts them, so the server agrees on the limit.
/// - UUIDs are the 8-4-4-4-12 hex form in either case; the model keeps them lowercase, and
///   duplicates are found on that form. Version and variant bits are not checked.
/// - Dates: `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, `T` and `Z` in either case, real
///   calendar days; a leap second (`:60`) is refused, since servers commonly refuse it.
/// - Image file names: besides docs/bundle-format.md's rules, a NUL character is refused (no archive or
///   file system can hold it).
/// - Unknown keys, `syncAttempts` and `lastSyncError` are ignored.
/// Whether the named images exist in the archive is the archive reader's check; it gets them
/// from `SessionDocument.imageReferences`.
public enum SessionValidator {
    /// docs/bundle-format.md's limit for `session.json`.
    public static let defaultMaxBytes = 16 * 1024 * 1024

    /// The document, or every issue found in it. Documents longer than `maxBytes` are refused
    /// before parsing; malformed JSON gives one issue (parsing stops at the first error).
    public static func validate(
        _ bytes: some Collection<UInt8>,
        maxBytes: Int = defaultMaxBytes
    ) -> Result<SessionDocument, SessionValidationError> {
        let size = bytes.count
        guard size <= maxBytes else {
            return .failure(
                SessionValidationError(issues: [
                    SessionIssue(
                        path: .root, code: .tooLarge, message: "must be at most \(maxBytes) bytes (was \(size))")
                ]))
        }
        let value: JSONValue
        do {
            value = try JSONValue.parse(bytes)
        } catch {
            return .failure(SessionValidationError(issues: [SessionIssue(parseError: error)]))
        }
        return validate(parsed: value)
    }

    /// The same checks on a document that is already parsed (no size limit applies).
    public static func validate(parsed value: JSONValue) -> Result<SessionDocument, SessionValidationError> {
        let decoder = SessionDecoder()
        let session = decoder.session(value)
        if let session, decoder.issues.isEmpty {
            return .success(SessionDocument(session: session))
        }
        return .failure(SessionValidationError(issues: decoder.issues))
    }

    /// `validate(_:maxBytes:)` for callers who prefer `try`.
    public static func decode(
        _ bytes: some Collection<UInt8>,
        maxBytes: Int = defaultMaxBytes
    ) throws(SessionValidationError) -> SessionDocument {
        try validate(bytes, maxBytes: maxBytes).get()
    }
}

/// Every reason a `session.json` was refused. `description` has one issue a line.
public struct SessionValidationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// In the order found: the session's fields in docs/bundle-format.md's order, then each nested record.
    /// Never empty.
    public let issues: [SessionIssue]

    public init(issues: [SessionIssue]) {
        self.issues = issues
    }

    public var description: String {
        issues.map(\.description).joined(separator: "\n")
    }
}

/// One problem in `session.json`: where (`path`), which rule (`code`), and a message that names
/// the rule and the offending value. Rendered as `path: message`, or the message alone for
/// the document as a whole:
/// `groupEntries[2].measurement.bulletDiameter: must be > 0 (was -1)`.
public struct SessionIssue: Sendable, Equatable, CustomStringConvertible {
    /// A stable short name for the rule, for `failed/NAME.error` and metrics.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String {
            case missingField = "missing_field"
            case wrongType = "wrong_type"
            case outOfRange = "out_of_range"
            case duplicateID = "duplicate_id"
            case badDate = "bad_date"
            case badUUID = "bad_uuid"
            case badFileName = "bad_file_name"
            case tooLong = "too_long"
            case malformedJSON = "malformed_json"
            case duplicateKey = "duplicate_key"
            case tooLarge = "too_large"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// A required field is absent or `null`.
        public static let missingField = Code(.missingField)
        /// A value of the wrong JSON type; also a non-integer where an integer is required.
        public static let wrongType = Code(.wrongType)
        /// A number outside its allowed range (or an integer beyond 64 bits).
        public static let outOfRange = Code(.outOfRange)
        /// An id used twice in the bundle.
        public static let duplicateID = Code(.duplicateID)
        /// A date that is not RFC 3339 with a time zone.
        public static let badDate = Code(.badDate)
        /// An id that is not a UUID.
        public static let badUUID = Code(.badUUID)
        /// An image file name that is not a plain name.
        public static let badFileName = Code(.badFileName)
        /// A string longer than its limit.
        public static let tooLong = Code(.tooLong)
        /// The bytes are not strict JSON.
        public static let malformedJSON = Code(.malformedJSON)
        /// One object holds a key twice.
        public static let duplicateKey = Code(.duplicateKey)
        /// The document is larger than the size limit.
        public static let tooLarge = Code(.tooLarge)

        public var description: String { base.rawValue }
    }

    public let path: JSONPath
    public let code: Code
    /// The rule and the offending value, without the path: `must be > 0 (was -1)`.
    public let message: String

    public init(path: JSONPath, code: Code, message: String) {
        self.path = path
        self.code = code
        self.message = message
    }

    init(parseError error: JSONParseError) {
        let location = "line \(error.line), column \(error.column) (byte \(error.byteOffset))"
        if error.code == .duplicateKey {
            self.init(path: error.path, code: .duplicateKey, message: "\(error.message) at \(location)")
        } else {
            self.init(
                path: error.path, code: .malformedJSON, message: "malformed JSON at \(location): \(error.message)")
        }
    }

    public var description: String {
        path.isRoot ? message : "\(path): \(message)"
    }
}
