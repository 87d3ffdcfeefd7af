/// A parsed JSON document, keeping what validation needs to see: `null` apart from a missing
/// key, integers apart from fractions, and objects in their original key order.
///
/// Hand-written rather than `JSONDecoder` + `Codable` because the server must tell
/// `"distance": 1` from `1.5` from `true` from `null` exactly, and parsing is on the hot path
/// of every POST.
enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([(key: String, value: JSONValue)])

    static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.integer(let a), .integer(let b)): a == b
        case (.number(let a), .number(let b)): a == b
        case (.string(let a), .string(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)):
            a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }

    /// The value of `key` in an object (the last one, if the key is repeated).
    subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.last(where: { $0.key == key })?.value
    }

    /// What a validation message calls this kind of value.
    var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .integer, .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// Compact JSON text for this value.
    var jsonText: String {
        var text = ""
        append(to: &text)
        return text
    }

    func append(to text: inout String) {
        switch self {
        case .null: text += "null"
        case .bool(let value): text += value ? "true" : "false"
        case .integer(let value): text += String(value)
        case .number(let value):
            // Swift prints the shortest text that reads back to the same Double; finite only,
            // since the parser refuses anything that overflows.
            text += "\(value)"
        case .string(let value): text.appendJSONString(value)
        case .array(let items):
            text += "["
            for (index, item) in items.enumerated() {
                if index > 0 { text += "," }
                item.append(to: &text)
            }
            text += "]"
        case .object(let members):
            text += "{"
            for (index, member) in members.enumerated() {
                if index > 0 { text += "," }
                text.appendJSONString(member.key)
                text += ":"
                member.value.append(to: &text)
            }
            text += "}"
        }
    }
}

/// Why a body is not JSON, with the byte offset where reading stopped.
struct JSONParseError: Error, Sendable, CustomStringConvertible {
    let offset: Int
    let reason: String
    var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

extension JSONValue {
    /// Parses one JSON document (RFC 8259) from UTF-8 bytes; whitespace may surround it.
    static func parse(_ bytes: UnsafeRawBufferPointer) throws(JSONParseError) -> JSONValue {
        var parser = JSONParser(bytes: bytes)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw parser.error("unexpected text after the document") }
        return value
    }

    static func parse(_ bytes: [UInt8]) throws -> JSONValue {
        try bytes.withUnsafeBytes { raw in try parse(raw) }
    }
}

private struct JSONParser {
    let bytes: UnsafeRawBufferPointer
    var index = 0
    /// Deeper documents are refused rather than risking the stack.
    static let maximumDepth = 64

    init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    func error(_ reason: String) -> JSONParseError { JSONParseError(offset: index, reason: reason) }

    var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func expectLiteral(_ literal: StaticString, _ value: JSONValue) throws(JSONParseError) -> JSONValue {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw error("unexpected end") }
        let matches = literal.withUTF8Buffer { expected in
            (0..<count).allSatisfy { bytes[index + $0] == expected[$0] }
        }
        guard matches else { throw error("unexpected character") }
        index += count
        return value
    }

    mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth < Self.maximumDepth else { throw error("nested deeper than \(Self.maximumDepth)") }
        guard let byte = current else { throw error("unexpected end") }
        switch byte {
        case UInt8(ascii: "{"): return try parseObject(depth: depth)
        case UInt8(ascii: "["): return try parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): return try expectLiteral("true", .bool(true))
        case UInt8(ascii: "f"): return try expectLiteral("false", .bool(false))
        case UInt8(ascii: "n"): return try expectLiteral("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error("unexpected character")
        }
    }

    mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
        index += 1  // {
        var members: [(key: String, value: JSONValue)] = []
        skipWhitespace()
        if current == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard current == UInt8(ascii: "\"") else { throw error("expected a key") }
            let key = try parseString()
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth + 1)
            members.append((key, value))
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"):
                index += 1
                return .object(members)
            default: throw error("expected ',' or '}'")
            }
        }
    }

    mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
        index += 1  // [
        var items: [JSONValue] = []
        skipWhitespace()
        if current == UInt8(ascii: "]") {
            index += 1
            return .array(items)
        }
        while true {
            skipWhitespace()
            items.append(try parseValue(depth: depth + 1))
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"):
                index += 1
                return .array(items)
            default: throw error("expected ',' or ']'")
            }
        }
    }

    mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var isInteger = true
        if current == UInt8(ascii: "-") { index += 1 }
        guard let first = current, first >= UInt8(ascii: "0"), first <= UInt8(ascii: "9") else {
            throw error("expected a digit")
        }
        if first == UInt8(ascii: "0") {
            index += 1
        } else {
            skipDigits()
        }
        if current == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard skipDigits() > 0 else { throw error("expected a digit after '.'") }
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
            guard skipDigits() > 0 else { throw error("expected a digit in the exponent") }
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger, let value = Int64(text) { return .integer(value) }
        guard let value = Double(text), value.isFinite else {
            index = start
            throw error("number out of range")
        }
        return .number(value)
    }

    @discardableResult
    mutating func skipDigits() -> Int {
        let start = index
        while let byte = current, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { index += 1 }
        return index - start
    }

    mutating func parseString() throws(JSONParseError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes, so the bytes are the string.
        while let byte = current, byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\"), byte >= 0x20 { index += 1 }
        if current == UInt8(ascii: "\"") {
            let slice = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
            index += 1
            guard let text = String(validating: slice, as: UTF8.self) else { throw error("invalid UTF-8 in a string") }
            return text
        }
        var utf8 = Array(UnsafeRawBufferPointer(rebasing: bytes[start..<index]))
        while true {
            guard let byte = current else { throw error("unterminated string") }
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let text = String(validating: utf8, as: UTF8.self) else {
                    throw error("invalid UTF-8 in a string")
                }
                return text
            case UInt8(ascii: "\\"):
                index += 1
                guard let escape = current else { throw error("unterminated string") }
                index += 1
                switch escape {
                case UInt8(ascii: "\""): utf8.append(0x22)
                case UInt8(ascii: "\\"): utf8.append(0x5C)
                case UInt8(ascii: "/"): utf8.append(0x2F)
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"):
                    var scalarValue = UInt32(try parseHex4())
                    if (0xD800..<0xDC00).contains(scalarValue) {
                        // A high surrogate must be followed by an escaped low surrogate.
                        guard current == UInt8(ascii: "\\"), index + 1 < bytes.count,
                            bytes[index + 1] == UInt8(ascii: "u")
                        else {
                            throw error("unpaired surrogate")
                        }
                        index += 2
                        let low = UInt32(try parseHex4())
                        guard (0xDC00..<0xE000).contains(low) else { throw error("unpaired surrogate") }
                        scalarValue = 0x10000 + ((scalarValue - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(scalarValue) else { throw error("unpaired surrogate") }
                    utf8.append(contentsOf: String(Character(scalar)).utf8)
                default:
                    throw error("invalid escape")
                }
            case 0..<0x20:
                throw error("control character in a string")
            default:
                utf8.append(byte)
                index += 1
            }
        }
    }

    mutating func parseHex4() throws(JSONParseError) -> UInt16 {
        guard index + 4 <= bytes.count else { throw error("unterminated escape") }
        var value: UInt16 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error("invalid hex digit")
            }
            value = value << 4 | UInt16(digit)
            index += 1
        }
        return value
    }
}
