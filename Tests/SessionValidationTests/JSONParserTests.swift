import DopeSync
import Testing

@Suite struct JSONParserTests {
    @Test(arguments: [
        (#""\u00e9\u00C9""#, "éÉ"),
        (#""\ud83c\udfaf""#, "🎯"),
        (#""\"\\\/\b\f\n\r\t""#, "\"\\/\u{8}\u{C}\n\r\t"),
        (#""\u0000""#, "\u{0}"),
        ("\"raw é 🎯 \u{2028}\"", "raw é 🎯 \u{2028}"),
        (#""""#, ""),
    ])
    func stringsDecodeEscapesAndUTF8(json: String, expected: String) throws {
        #expect(try JSONValue.parse(json.bytes) == .string(expected))
    }

    @Test func objectsKeepDocumentOrder() throws {
        let value = try JSONValue.parse(#" { "b" : 1 , "a" : [ true , false , null ] , "c" : { } } "#.bytes)
        #expect(value.objectValue?.keys == ["b", "a", "c"])
        #expect(value == ["b": 1, "a": [true, false, nil], "c": [:]])
    }

    struct Malformed: Sendable, CustomTestStringConvertible {
        let name: String
        let bytes: [UInt8]
        let code: JSONParseError.Code
        let line: Int
        let column: Int

        init(_ name: String, _ bytes: [UInt8], _ code: JSONParseError.Code, line: Int = 1, column: Int) {
            self.name = name
            self.bytes = bytes
            self.code = code
            self.line = line
            self.column = column
        }

        var testDescription: String { name }
    }

    static let malformed: [Malformed] = [
        Malformed("empty document", [], .unexpectedEnd, column: 1),
        Malformed("only whitespace", " \n ".bytes, .unexpectedEnd, line: 2, column: 2),
        Malformed("trailing garbage", "{} x".bytes, .trailingData, column: 4),
        Malformed("two values", "1 2".bytes, .trailingData, column: 3),
        Malformed("trailing comma in array", "[1,]".bytes, .unexpectedByte, column: 4),
        Malformed("trailing comma in object", #"{"a":1,}"#.bytes, .unexpectedByte, column: 8),
        Malformed("missing comma", "[1 2]".bytes, .unexpectedByte, column: 4),
        Malformed("missing colon", #"{"a" 1}"#.bytes, .unexpectedByte, column: 6),
        Malformed("unquoted key", "{a:1}".bytes, .unexpectedByte, column: 2),
        Malformed("single quotes", "['a']".bytes, .unexpectedByte, column: 2),
        Malformed("line comment", "// c\n1".bytes, .unexpectedByte, column: 1),
        Malformed("block comment", "[1/*c*/]".bytes, .unexpectedByte, column: 3),
        Malformed("NaN", "NaN".bytes, .unexpectedByte, column: 1),
        Malformed("Infinity", "[Infinity]".bytes, .unexpectedByte, column: 2),
        Malformed("negative Infinity", "-Infinity".bytes, .invalidNumber, column: 2),
        Malformed("leading zero", "01".bytes, .invalidNumber, column: 2),
        Malformed("leading plus", "+1".bytes, .unexpectedByte, column: 1),
        Malformed("bare fraction", ".5".bytes, .unexpectedByte, column: 1),
        Malformed("empty fraction", "1.".bytes, .invalidNumber, column: 3),
        Malformed("empty exponent", "1e+".bytes, .invalidNumber, column: 4),
        Malformed("number overflowing a double", "[1e400]".bytes, .invalidNumber, column: 2),
        Malformed("misspelt literal", "tru".bytes, .unexpectedByte, column: 1),
        Malformed("unterminated string", #""abc"#.bytes, .unexpectedEnd, column: 5),
        Malformed("unterminated array", "[1,\n2".bytes, .unexpectedEnd, line: 2, column: 2),
        Malformed("raw newline in string", "\"a\nb\"".bytes, .unexpectedByte, column: 3),
        Malformed("unknown escape", #""\x""#.bytes, .invalidEscape, column: 2),
        Malformed("short unicode escape", #""\u12""#.bytes, .invalidEscape, column: 6),
        Malformed("lone high surrogate", #""\ud83c""#.bytes, .invalidEscape, column: 2),
        Malformed("high surrogate then letter", #""\ud83c\u0041""#.bytes, .invalidEscape, column: 2),
        Malformed("lone low surrogate", #""\udfaf""#.bytes, .invalidEscape, column: 2),
        Malformed("byte order mark", [0xEF, 0xBB, 0xBF] + "{}".bytes, .unexpectedByte, column: 1),
        Malformed("invalid UTF-8 lead byte", [0x22, 0xC3, 0x28, 0x22], .invalidUTF8, column: 2),
        Malformed("overlong encoding", [0x22, 0xC0, 0xAF, 0x22], .invalidUTF8, column: 2),
        Malformed("encoded surrogate", [0x22, 0xED, 0xA0, 0x80, 0x22], .invalidUTF8, column: 2),
        Malformed("above U+10FFFF", [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22], .invalidUTF8, column: 2),
        Malformed("truncated sequence", [0x22, 0xE2, 0x82], .invalidUTF8, column: 2),
        Malformed("non-ASCII outside strings", [0x5B, 0xC3, 0xA9, 0x5D], .unexpectedByte, column: 2),
        Malformed("duplicate key", #"{"a":1,"b":{"c":1,"c":2}}"#.bytes, .duplicateKey, column: 19),
        Malformed(
            "error position on a later line", "{\n  \"a\": 1,\n  \"b\": x\n}".bytes, .unexpectedByte, line: 3, column: 8
        ),
    ]

    @Test(arguments: malformed)
    func malformedDocumentsAreRefusedWithTheirPosition(_ row: Malformed) {
        #expect {
            try JSONValue.parse(row.bytes)
        } throws: { error in
            guard let error = error as? JSONParseError else { return false }
            return error.code == row.code && error.line == row.line && error.column == row.column
        }
    }

    @Test func duplicateKeyErrorNamesThePath() {
        #expect {
            try JSONValue.parse(#"{"groupEntries":[{"id":1},{"measurement":{"x":1,"x":2}}]}"#.bytes)
        } throws: { error in
            (error as? JSONParseError)?.path.description == "groupEntries[1].measurement.x"
                && (error as? JSONParseError)?.message == #"duplicate key "x""#
        }
    }

    @Test func canonicallyEquivalentKeysAreDuplicates() {
        #expect(throws: JSONParseError.self) {
            try JSONValue.parse("{\"\u{E9}\":1,\"e\u{301}\":2}".bytes)
        }
    }

    @Test(arguments: [1, 2, 64])
    func nestingUpToTheLimitIsAccepted(depth: Int) throws {
        let json = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
        #expect(try JSONValue.parse(json.bytes) != .null)
    }

    /// Each row: an opening that nests one level, how often it repeats, and where the 65th
    /// level starts (where the parser must stop).
    @Test(arguments: [("[", 65, 64), ("[", 1_000_000, 64), (#"{"a":"#, 100_000, 64 * 5)])
    func deeperNestingIsRefusedWithoutExhaustingTheStack(opening: String, count: Int, offset: Int) {
        let json = String(repeating: opening, count: count)
        #expect {
            try JSONValue.parse(json.bytes)
        } throws: { error in
            let error = error as? JSONParseError
            return error?.code == .tooDeep && error?.byteOffset == offset
        }
    }

    @Test func theDepthLimitCanBeChosen() throws {
        #expect(throws: JSONParseError.self) { try JSONValue.parse("[[1]]".bytes, maxDepth: 1) }
        #expect(try JSONValue.parse("[[1]]".bytes, maxDepth: 2) == [[1]])
    }

    struct NumberCase: Sendable {
        let literal: String
        let isIntegerLiteral: Bool
        let intValue: Int?
        let doubleValue: Double
    }

    @Test(arguments: [
        NumberCase(literal: "0", isIntegerLiteral: true, intValue: 0, doubleValue: 0),
        NumberCase(literal: "-0", isIntegerLiteral: true, intValue: 0, doubleValue: -0.0),
        NumberCase(literal: "1.0", isIntegerLiteral: false, intValue: nil, doubleValue: 1),
        NumberCase(literal: "1e2", isIntegerLiteral: false, intValue: nil, doubleValue: 100),
        NumberCase(literal: "-1.25E-3", isIntegerLiteral: false, intValue: nil, doubleValue: -0.00125),
        NumberCase(
            literal: "9223372036854775807", isIntegerLiteral: true, intValue: Int.max,
            doubleValue: 9.223372036854775807e18),
        NumberCase(
            literal: "-9223372036854775808", isIntegerLiteral: true, intValue: Int.min,
            doubleValue: -9.223372036854775808e18),
        NumberCase(
            literal: "9223372036854775808", isIntegerLiteral: true, intValue: nil, doubleValue: 9.223372036854775808e18),
        NumberCase(
            literal: "123456789012345678901234567890", isIntegerLiteral: true, intValue: nil,
            doubleValue: 1.2345678901234568e29),
        NumberCase(
            literal: "1.7976931348623157e308", isIntegerLiteral: false, intValue: nil,
            doubleValue: .greatestFiniteMagnitude),
        NumberCase(literal: "5e-324", isIntegerLiteral: false, intValue: nil, doubleValue: .leastNonzeroMagnitude),
        NumberCase(literal: "1e-400", isIntegerLiteral: false, intValue: nil, doubleValue: 0),
    ])
    func numbersKeepTheirLiteral(_ row: NumberCase) throws {
        let number = try #require(try JSONValue.parse(row.literal.bytes).numberValue)
        #expect(number.literal == row.literal)
        #expect(number.isIntegerLiteral == row.isIntegerLiteral)
        #expect(number.intValue == row.intValue)
        #expect(number.doubleValue == row.doubleValue)
    }

    @Test(arguments: ["01", " 1", "1 ", "+1", "1.", "NaN", "", "[1]", "\"1\"", "0x10"])
    func numberLiteralsAreChecked(literal: String) {
        #expect(JSONNumber(literal: literal) == nil)
    }
}
