/// Strings: plain JSONByte slices taken whole, escapes and UTF-8 checked as RFC 8259 and RFC 3629 say.
extension JSONParser {

    mutating func parseString() throws(JSONParseError) -> String {
        index += 1  // the opening quote
        let start = index
        // Most strings are plain JSONByte without escapes: take them in one slice.
        while let byte = current, byte != JSONByte.quote, byte != JSONByte.backslash, byte >= 0x20, byte < 0x80 {
            index += 1
        }
        if current == JSONByte.quote {
            index += 1
            return String(decoding: bytes[start..<(index - 1)], as: UTF8.self)
        }
        var buffer = Array(bytes[start..<index])
        while true {
            guard let byte = current else {
                throw failure(.unexpectedEnd, "the document ends inside a string")
            }
            switch byte {
            case JSONByte.quote:
                index += 1
                // Every byte in the buffer has been checked, so decoding replaces nothing.
                return String(decoding: buffer, as: UTF8.self)
            case JSONByte.backslash:
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
            case JSONByte.quote, JSONByte.backslash, JSONByte.slash: escaped
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
            guard index + 1 < bytes.count, bytes[index] == JSONByte.backslash, bytes[index + 1] == UInt8(ascii: "u")
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
            guard let digit = JSONByte.hexValue(byte) else {
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
}
