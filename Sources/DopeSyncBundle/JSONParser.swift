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

enum JSONByte {
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
struct JSONParser {
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
        case JSONByte.openBrace: return try parseObject()
        case JSONByte.openBracket: return try parseArray()
        case JSONByte.quote: return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectWord("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectWord("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectWord("null")
            return .null
        case JSONByte.minus, JSONByte.zero...JSONByte.nine: return .number(try parseNumber())
        case JSONByte.slash: throw failure(.unexpectedByte, "comments are not allowed")
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
        if current == JSONByte.closeBracket {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            if current == JSONByte.closeBracket {
                throw failure(.unexpectedByte, "a trailing comma is not allowed")
            }
            path.append(.index(elements.count))
            elements.append(try parseValue())
            path.removeLast()
            skipWhitespace()
            switch current {
            case JSONByte.comma: index += 1
            case JSONByte.closeBracket:
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
        if current == JSONByte.closeBrace {
            index += 1
            return .object(JSONObject(members))
        }
        while true {
            skipWhitespace()
            switch current {
            case JSONByte.quote: break
            case JSONByte.closeBrace: throw failure(.unexpectedByte, "a trailing comma is not allowed")
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
            guard current == JSONByte.colon else {
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
            case JSONByte.comma: index += 1
            case JSONByte.closeBrace:
                index += 1
                return .object(JSONObject(members))
            case nil: throw failure(.unexpectedEnd, "the document ends inside an object")
            case let byte?: throw failure(.unexpectedByte, "expected ',' or '}', found \(Self.describe(byte))")
            }
        }
    }

    // MARK: Numbers

    mutating func parseNumber() throws(JSONParseError) -> JSONNumber {
        let start = index
        var isIntegerLiteral = true
        if current == JSONByte.minus { index += 1 }
        guard let first = current, JSONByte.isDigit(first) else {
            throw failure(.invalidNumber, "expected a digit after '-'")
        }
        index += 1
        if first == JSONByte.zero, let next = current, JSONByte.isDigit(next) {
            throw failure(.invalidNumber, "a number must not have a leading zero")
        }
        skipDigits()
        if current == JSONByte.dot {
            isIntegerLiteral = false
            index += 1
            try expectDigit(after: "the decimal point")
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            isIntegerLiteral = false
            index += 1
            if current == JSONByte.plus || current == JSONByte.minus { index += 1 }
            try expectDigit(after: "the exponent")
        }
        let literal = String(decoding: bytes[start..<index], as: UTF8.self)
        guard let value = Double(literal), value.isFinite else {
            throw failure(.invalidNumber, "\(literal) is too large for a double", at: start)
        }
        return JSONNumber(checkedLiteral: literal, doubleValue: value, isIntegerLiteral: isIntegerLiteral)
    }

    mutating func expectDigit(after what: String) throws(JSONParseError) {
        guard let byte = current, JSONByte.isDigit(byte) else {
            throw failure(.invalidNumber, "expected a digit after \(what)")
        }
        skipDigits()
    }

    mutating func skipDigits() {
        while let byte = current, JSONByte.isDigit(byte) { index += 1 }
    }

    // MARK: Errors

    func failure(_ code: JSONParseError.Code, _ message: String, at offset: Int? = nil) -> JSONParseError {
        let offset = offset ?? index
        var line = 1
        var lineStart = 0
        for position in 0..<min(offset, bytes.count) where bytes[position] == JSONByte.newline {
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
