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

extension JSONValue {
    /// The nesting limit used unless a caller asks for another.
    public static let defaultMaxDepth = 64

    /// Parses one JSON text per RFC 8259, strictly: UTF-8 without a byte order mark, no
    /// comments, no trailing commas, no NaN or infinities, no number too large for a Double,
    /// no lone surrogate escapes, no duplicate keys in one object (keys compare as Swift
    /// strings, so canonically equivalent keys count as duplicates), at most `maxDepth`
    /// nested arrays and objects, and nothing but whitespace after the value.
    ///
    /// Recursion is bounded by `maxDepth`, so hostile input cannot exhaust the stack.
    public static func parse(
        _ bytes: some Collection<UInt8>,
        maxDepth: Int = defaultMaxDepth
    ) throws(JSONParseError) -> JSONValue {
        var parser = JSONParser(bytes: Array(bytes), maxDepth: maxDepth)
        return try parser.parseDocument()
    }
}

private enum ASCII {
    static let quote = UInt8(ascii: "\"")
    static let backslash = UInt8(ascii: "\\")
    static let slash = UInt8(ascii: "/")
    static let comma = UInt8(ascii: ",")
    static let colon = UInt8(ascii: ":")
    static let openBrace = UInt8(ascii: "{")
    static let closeBrace = UInt8(ascii: "}")
    static let openBracket = UInt8(ascii: "[")
    static let closeBracket = UInt8(ascii: "]")
    static let minus = UInt8(ascii: "-")
    static let plus = UInt8(ascii: "+")
    static let dot = UInt8(ascii: ".")
    static let zero = UInt8(ascii: "0")
    static let nine = UInt8(ascii: "9")
    static let newline = UInt8(ascii: "\n")

    static func isDigit(_ byte: UInt8) -> Bool { (zero...nine).contains(byte) }

    static func hexValue(_ byte: UInt8) -> UInt32? {
        switch byte {
        case zero...nine: UInt32(byte - zero)
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(byte - UInt8(ascii: "A") + 10)
        default: nil
        }
    }
}

/// A recursive-descent parser over a byte array. Errors abort the parse, so `path` at the
/// moment of a throw is where the error is.
private struct JSONParser {
    let bytes: [UInt8]
    let maxDepth: Int
    var index = 0
    var depth = 0
    var path: [JSONPath.Component] = []

    init(bytes: [UInt8], maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
            throw failure(.unexpectedByte, "a byte order mark is not allowed")
        }
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        if let byte = current {
            throw failure(.trailingData, "unexpected \(Self.describe(byte)) after the JSON value")
        }
        return value
    }

    mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard let byte = current else {
            throw failure(.unexpectedEnd, "the document ends where a value was expected")
        }
        switch byte {
        case ASCII.openBrace: return try parseObject()
        case ASCII.openBracket: return try parseArray()
        case ASCII.quote: return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectWord("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectWord("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectWord("null")
            return .null
        case ASCII.minus, ASCII.zero...ASCII.nine: return .number(try parseNumber())
        case ASCII.slash: throw failure(.unexpectedByte, "comments are not allowed")
        default: throw failure(.unexpectedByte, "expected a value, found \(Self.describe(byte))")
        }
    }

    mutating func expectWord(_ word: StaticString) throws(JSONParseError) {
        let wordBytes = UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
        guard bytes[index...].starts(with: wordBytes) else {
            throw failure(.unexpectedByte, "expected a value, found \(Self.describe(bytes[index]))")
        }
        index += wordBytes.count
    }

    mutating func skipWhitespace() {
        while let byte = current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 {
            index += 1
        }
    }

    mutating func enterContainer() throws(JSONParseError) {
        depth += 1
        if depth > maxDepth {
            throw failure(.tooDeep, "arrays and objects are nested more than \(maxDepth) levels deep")
        }
        index += 1
    }

    mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enterContainer()
        defer { depth -= 1 }
        var elements: [JSONValue] = []
        skipWhitespace()
        if current == ASCII.closeBracket {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            if current == ASCII.closeBracket {
                throw failure(.unexpectedByte, "a trailing comma is not allowed")
            }
            path.append(.index(elements.count))
            elements.append(try parseValue())
            path.removeLast()
            skipWhitespace()
            switch current {
            case ASCII.comma: index += 1
            case ASCII.closeBracket:
                index += 1
                return .array(elements)
            case nil: throw failure(.unexpectedEnd, "the document ends inside an array")
            case let byte?: throw failure(.unexpectedByte, "expected ',' or ']', found \(Self.describe(byte))")
            }
        }
    }

    mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enterContainer()
        defer { depth -= 1 }
        var members: [JSONObject.Member] = []
        var keys: Set<String> = []
        skipWhitespace()
        if current == ASCII.closeBrace {
            index += 1
            return .object(JSONObject(members))
        }
        while true {
            skipWhitespace()
            switch current {
            case ASCII.quote: break
            case ASCII.closeBrace: throw failure(.unexpectedByte, "a trailing comma is not allowed")
            case nil: throw failure(.unexpectedEnd, "the document ends inside an object")
            case let byte?: throw failure(.unexpectedByte, "expected a string key, found \(Self.describe(byte))")
            }
            let keyOffset = index
            let key = try parseString()
            path.append(.key(key))
            guard keys.insert(key).inserted else {
                throw failure(.duplicateKey, "duplicate key \(Self.quoted(key))", at: keyOffset)
            }
            skipWhitespace()
            guard current == ASCII.colon else {
                throw current == nil
                    ? failure(.unexpectedEnd, "the document ends inside an object")
                    : failure(.unexpectedByte, "expected ':' after a key, found \(Self.describe(bytes[index]))")
            }
            index += 1
            skipWhitespace()
            let value = try parseValue()
            path.removeLast()
            members.append(JSONObject.Member(key: key, value: value))
            skipWhitespace()
            switch current {
            case ASCII.comma: index += 1
            case ASCII.closeBrace:
                index += 1
                return .object(JSONObject(members))
            case nil: throw failure(.unexpectedEnd, "the document ends inside an object")
            case let byte?: throw failure(.unexpectedByte, "expected ',' or '}', found \(Self.describe(byte))")
            }
        }
    }

    // MARK: Strings

    mutating func parseString() throws(JSONParseError) -> String {
        index += 1  // the opening quote
        let start = index
        // Most strings are plain ASCII without escapes: take them in one slice.
        while let byte = current, byte != ASCII.quote, byte != ASCII.backslash, byte >= 0x20, byte < 0x80 {
            index += 1
        }
        if current == ASCII.quote {
            index += 1
            return String(decoding: bytes[start..<(index - 1)], as: UTF8.self)
        }
        var buffer = Array(bytes[start..<index])
        while true {
            guard let byte = current else {
                throw failure(.unexpectedEnd, "the document ends inside a string")
            }
            switch byte {
            case ASCII.quote:
                index += 1
                // Every byte in the buffer has been checked, so decoding replaces nothing.
                return String(decoding: buffer, as: UTF8.self)
            case ASCII.backslash:
                try parseEscape(into: &buffer)
            case 0x00..<0x20:
                throw failure(
                    .unexpectedByte, "a control character (\(Self.describe(byte))) must be escaped in a string")
            case 0x80...:
                try copyUTF8Sequence(into: &buffer)
            default:
                buffer.append(byte)
                index += 1
            }
        }
    }

    mutating func parseEscape(into buffer: inout [UInt8]) throws(JSONParseError) {
        guard index + 1 < bytes.count else {
            throw failure(.unexpectedEnd, "the document ends inside a string")
        }
        let escaped = bytes[index + 1]
        let simple: UInt8? =
            switch escaped {
            case ASCII.quote, ASCII.backslash, ASCII.slash: escaped
            case UInt8(ascii: "b"): 0x08
            case UInt8(ascii: "f"): 0x0C
            case UInt8(ascii: "n"): 0x0A
            case UInt8(ascii: "r"): 0x0D
            case UInt8(ascii: "t"): 0x09
            default: nil
            }
        if let simple {
            buffer.append(simple)
            index += 2
            return
        }
        guard escaped == UInt8(ascii: "u") else {
            throw failure(.invalidEscape, "a backslash followed by \(Self.describe(escaped)) is not a JSON escape")
        }
        let escapeOffset = index
        let unit = try parseHexQuad()
        let scalarValue: UInt32
        switch unit {
        case 0xD800...0xDBFF:
            guard index + 1 < bytes.count, bytes[index] == ASCII.backslash, bytes[index + 1] == UInt8(ascii: "u")
            else {
                throw failure(
                    .invalidEscape, "a high surrogate escape must be followed by a low surrogate escape",
                    at: escapeOffset)
            }
            let low = try parseHexQuad()
            guard (0xDC00...0xDFFF).contains(low) else {
                throw failure(
                    .invalidEscape, "a high surrogate escape must be followed by a low surrogate escape",
                    at: escapeOffset)
            }
            scalarValue = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
        case 0xDC00...0xDFFF:
            throw failure(.invalidEscape, "a low surrogate escape without a high surrogate before it", at: escapeOffset)
        default:
            scalarValue = unit
        }
        // Not nil: surrogates were handled above and the value is at most 0x10FFFF.
        let scalar = Unicode.Scalar(scalarValue)!
        buffer.append(contentsOf: String(scalar).utf8)
    }

    /// Reads `\uXXXX` at `index` and returns the code unit.
    mutating func parseHexQuad() throws(JSONParseError) -> UInt32 {
        index += 2  // `\u`
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = current else {
                throw failure(.unexpectedEnd, "the document ends inside a string")
            }
            guard let digit = ASCII.hexValue(byte) else {
                throw failure(.invalidEscape, "\\u must be followed by four hex digits, found \(Self.describe(byte))")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    /// Copies one multi-byte UTF-8 sequence, checked per the Unicode standard's table of
    /// well-formed sequences (no overlongs, no encoded surrogates, nothing above U+10FFFF).
    mutating func copyUTF8Sequence(into buffer: inout [UInt8]) throws(JSONParseError) {
        let lead = bytes[index]
        let secondRange: ClosedRange<UInt8>
        let length: Int
        switch lead {
        case 0xC2...0xDF:
            length = 2
            secondRange = 0x80...0xBF
        case 0xE0:
            length = 3
            secondRange = 0xA0...0xBF
        case 0xE1...0xEC, 0xEE...0xEF:
            length = 3
            secondRange = 0x80...0xBF
        case 0xED:
            length = 3
            secondRange = 0x80...0x9F
        case 0xF0:
            length = 4
            secondRange = 0x90...0xBF
        case 0xF1...0xF3:
            length = 4
            secondRange = 0x80...0xBF
        case 0xF4:
            length = 4
            secondRange = 0x80...0x8F
        default: throw failure(.invalidUTF8, "\(Self.describe(lead)) cannot start a UTF-8 sequence")
        }
        for offset in 1..<length {
            let position = index + offset
            let allowed = offset == 1 ? secondRange : 0x80...0xBF
            guard position < bytes.count, allowed.contains(bytes[position]) else {
                throw failure(.invalidUTF8, "an invalid or truncated UTF-8 sequence")
            }
        }
        buffer.append(contentsOf: bytes[index..<(index + length)])
        index += length
    }

    // MARK: Numbers

    mutating func parseNumber() throws(JSONParseError) -> JSONNumber {
        let start = index
        var isIntegerLiteral = true
        if current == ASCII.minus { index += 1 }
        guard let first = current, ASCII.isDigit(first) else {
            throw failure(.invalidNumber, "expected a digit after '-'")
        }
        index += 1
        if first == ASCII.zero, let next = current, ASCII.isDigit(next) {
            throw failure(.invalidNumber, "a number must not have a leading zero")
        }
        skipDigits()
        if current == ASCII.dot {
            isIntegerLiteral = false
            index += 1
            try expectDigit(after: "the decimal point")
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            isIntegerLiteral = false
            index += 1
            if current == ASCII.plus || current == ASCII.minus { index += 1 }
            try expectDigit(after: "the exponent")
        }
        let literal = String(decoding: bytes[start..<index], as: UTF8.self)
        guard let value = Double(literal), value.isFinite else {
            throw failure(.invalidNumber, "\(literal) is too large for a double", at: start)
        }
        return JSONNumber(checkedLiteral: literal, doubleValue: value, isIntegerLiteral: isIntegerLiteral)
    }

    mutating func expectDigit(after what: String) throws(JSONParseError) {
        guard let byte = current, ASCII.isDigit(byte) else {
            throw failure(.invalidNumber, "expected a digit after \(what)")
        }
        skipDigits()
    }

    mutating func skipDigits() {
        while let byte = current, ASCII.isDigit(byte) { index += 1 }
    }

    // MARK: Errors

    func failure(_ code: JSONParseError.Code, _ message: String, at offset: Int? = nil) -> JSONParseError {
        let offset = offset ?? index
        var line = 1
        var lineStart = 0
        for position in 0..<min(offset, bytes.count) where bytes[position] == ASCII.newline {
            line += 1
            lineStart = position + 1
        }
        return JSONParseError(
            code: code, message: message, byteOffset: offset, line: line,
            column: offset - lineStart + 1, path: JSONPath(path))
    }

    static func describe(_ byte: UInt8) -> String {
        (0x21..<0x7F).contains(byte)
            ? "'\(Character(Unicode.Scalar(byte)))'"
            : "byte 0x\(String(byte, radix: 16, uppercase: true).leftPadded(to: 2))"
    }

    static func quoted(_ string: String) -> String { JSONValue.quoted(string) }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
