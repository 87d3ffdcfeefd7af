/// A JSON value as it appeared in a document, or as a caller built it for a request body.
///
/// Objects keep their members in order (document order when parsed, the caller's order when
/// built), numbers keep their exact literal text, so `serialized()` depends only on the value.
/// Parse one with `JSONValue.parse(_:maxDepth:)`.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(JSONNumber)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// The object's members, or nil for every other kind of value.
    public var objectValue: JSONObject? {
        if case .object(let object) = self { object } else { nil }
    }

    /// The array's elements, or nil for every other kind of value.
    public var arrayValue: [JSONValue]? {
        if case .array(let elements) = self { elements } else { nil }
    }

    /// The string, or nil for every other kind of value.
    public var stringValue: String? {
        if case .string(let string) = self { string } else { nil }
    }

    /// The number, or nil for every other kind of value.
    public var numberValue: JSONNumber? {
        if case .number(let number) = self { number } else { nil }
    }
}

/// A JSON number: its literal text exactly as written, and the nearest finite `Double`.
///
/// Two numbers are equal when their literals are equal (`1.0` and `1` differ), because the
/// literal is what `serialized()` writes back.
public struct JSONNumber: Sendable, Hashable, CustomStringConvertible {
    /// The literal, valid per RFC 8259 (`-0`, `1.50`, `2e10` stay as written).
    public let literal: String
    /// The literal's value as a `Double`; always finite.
    public let doubleValue: Double
    /// True when the literal has neither a fraction nor an exponent (`12`, `-0`; not `1.0`, `1e2`).
    public let isIntegerLiteral: Bool

    /// Checks `literal` against the JSON number grammar; nil if it does not match or if its
    /// magnitude does not fit in a `Double`.
    public init?(literal: String) {
        // The parser would skip surrounding whitespace; a literal must be the number alone.
        guard case .number(let number)? = try? JSONValue.parse(Array(literal.utf8), maxDepth: 1),
            number.literal == literal
        else { return nil }
        self = number
    }

    /// An integer, written in decimal.
    public init(_ value: Int) {
        self.init(checkedLiteral: String(value), doubleValue: Double(value), isIntegerLiteral: true)
    }

    /// A finite double, written as Swift's shortest round-tripping form (`1.5`, `100.0`, `1e-05`);
    /// nil for NaN and infinities, which JSON cannot express.
    public init?(_ value: Double) {
        guard value.isFinite else { return nil }
        self.init(checkedLiteral: value.description, doubleValue: value, isIntegerLiteral: false)
    }

    /// For the parser and the initialisers above, which have already checked the literal.
    init(checkedLiteral: String, doubleValue: Double, isIntegerLiteral: Bool) {
        self.literal = checkedLiteral
        self.doubleValue = doubleValue
        self.isIntegerLiteral = isIntegerLiteral
    }

    /// The value as an `Int` when the literal is an integer literal within `Int`'s range.
    public var intValue: Int? {
        isIntegerLiteral ? Int(literal) : nil
    }

    public var description: String { literal }

    public static func == (lhs: JSONNumber, rhs: JSONNumber) -> Bool {
        lhs.literal == rhs.literal
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(literal)
    }
}

/// A JSON object: members in a fixed order. Lookups by key take the first member with that
/// key; the parser never produces an object with two equal keys.
public struct JSONObject: Sendable, Equatable, ExpressibleByDictionaryLiteral {
    public struct Member: Sendable, Equatable {
        public var key: String
        public var value: JSONValue

        public init(key: String, value: JSONValue) {
            self.key = key
            self.value = value
        }
    }

    public var members: [Member]

    public init(_ members: [Member] = []) {
        self.members = members
    }

    /// Members in the order of the literal.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.members = elements.map { Member(key: $0.0, value: $0.1) }
    }

    public var keys: [String] { members.map(\.key) }

    /// The value of the first member with this key. Setting replaces that member's value in
    /// place, appends a member when there is none, and removes the member when set to nil.
    public subscript(key: String) -> JSONValue? {
        get { members.first { $0.key == key }?.value }
        set {
            let position = members.firstIndex { $0.key == key }
            switch (position, newValue) {
            case (let position?, let value?): members[position].value = value
            case (let position?, nil): members.remove(at: position)
            case (nil, let value?): members.append(Member(key: key, value: value))
            case (nil, nil): break
            }
        }
    }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByStringLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int) { self = .number(JSONNumber(value)) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }

    /// An object whose members keep the literal's order.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(JSONObject(elements.map { JSONObject.Member(key: $0.0, value: $0.1) }))
    }
}
