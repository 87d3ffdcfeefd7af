/// Why a document is not strict JSON, and where: the byte offset (from 0), the line and the
/// column (both from 1; the column counts bytes), and the path of the value being read.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable short name for the kind of error, for logs and metrics.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String {
            case unexpectedEnd = "unexpected_end"
            case unexpectedByte = "unexpected_byte"
            case invalidUTF8 = "invalid_utf8"
            case invalidEscape = "invalid_escape"
            case invalidNumber = "invalid_number"
            case tooDeep = "too_deep"
            case duplicateKey = "duplicate_key"
            case trailingData = "trailing_data"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The document ends inside a value.
        public static let unexpectedEnd = Code(.unexpectedEnd)
        /// A byte that JSON's grammar does not allow here (also a comment, a trailing comma,
        /// an unescaped control character, a byte order mark).
        public static let unexpectedByte = Code(.unexpectedByte)
        /// A string holds bytes that are not UTF-8.
        public static let invalidUTF8 = Code(.invalidUTF8)
        /// A backslash escape that JSON does not define, or a lone UTF-16 surrogate.
        public static let invalidEscape = Code(.invalidEscape)
        /// A number that breaks the grammar (`01`, `1.`, `NaN`) or overflows a Double.
        public static let invalidNumber = Code(.invalidNumber)
        /// Arrays and objects nested deeper than the limit.
        public static let tooDeep = Code(.tooDeep)
        /// One object holds the same key twice.
        public static let duplicateKey = Code(.duplicateKey)
        /// Something other than whitespace follows the value.
        public static let trailingData = Code(.trailingData)

        public var description: String { base.rawValue }
    }

    public let code: Code
    /// What is wrong, without the position.
    public let message: String
    public let byteOffset: Int
    public let line: Int
    public let column: Int
    /// The value being read (for a duplicate key: the repeated key's path).
    public let path: JSONPath

    public var description: String {
        let location = "line \(line), column \(column) (byte \(byteOffset))"
        return path.isRoot ? "\(location): \(message)" : "\(location), at \(path): \(message)"
    }
}
