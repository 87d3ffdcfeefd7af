/// The kinds of record the API creates, as stored in the `records.kind` column.
enum RecordKind: String, Sendable, CaseIterable {
    case session
    case dope
    case chrono
    case reading
    case group
    case measurement
    case image

    var schema: RecordSchema? {
        switch self {
        case .session: .session
        case .dope: .dope
        case .chrono: .chrono
        case .reading: .reading
        case .group: .group
        case .measurement: .measurement
        case .image: nil  // multipart, see ImageUpload
        }
    }
}

/// Which reference set a field's id must belong to.
enum ReferenceKind: Sendable {
    case rifleSetup, location, ammunition, ammoLot

    func ids(in references: ReferenceIDs) -> IDSet {
        switch self {
        case .rifleSetup: references.rifleSetups
        case .location: references.locations
        case .ammunition: references.ammunition
        case .ammoLot: references.ammoLots
        }
    }
}

/// One property of a request schema in docs/api.yaml.
struct FieldRule: Sendable {
    enum ValueType: Sendable {
        case uuid
        case dateTime
        case integer(minimum: Int64)
        case number(minimum: Double?, maximum: Double?, exclusiveMinimum: Bool = false)
        case string(maxLength: Int?)
        case boolean
        /// `holePositions`: an array of `{x: number, y: number}`.
        case points
    }

    let name: String
    let type: ValueType
    let required: Bool
    let reference: ReferenceKind?

    init(_ name: String, _ type: ValueType, required: Bool = false, reference: ReferenceKind? = nil) {
        self.name = name
        self.type = type
        self.required = required
        self.reference = reference
    }
}

/// A request schema: its fields in the order docs/api.yaml lists them (which is the stored order).
struct RecordSchema: Sendable {
    let fields: [FieldRule]

    static let session = RecordSchema(fields: [
        FieldRule("clientId", .uuid, required: true),
        FieldRule("sessionDate", .dateTime, required: true),
        FieldRule("rifleSetupId", .integer(minimum: 1), required: true, reference: .rifleSetup),
        FieldRule("locationId", .integer(minimum: 1), reference: .location),
        FieldRule("notes", .string(maxLength: 10_000)),
        FieldRule("temperature", .number(minimum: nil, maximum: nil)),
        FieldRule("humidity", .number(minimum: 0, maximum: 100)),
        FieldRule("pressure", .number(minimum: nil, maximum: nil)),
        FieldRule("windSpeed", .number(minimum: nil, maximum: nil)),
        FieldRule("windDirection", .number(minimum: 0, maximum: 360)),
        FieldRule("altitude", .number(minimum: nil, maximum: nil)),
    ])

    static let dope = RecordSchema(fields: [
        FieldRule("clientId", .uuid, required: true),
        FieldRule("distance", .integer(minimum: 1), required: true),
        FieldRule("elevationMoa", .number(minimum: nil, maximum: nil)),
        FieldRule("elevationMil", .number(minimum: nil, maximum: nil)),
        FieldRule("windageMoa", .number(minimum: nil, maximum: nil)),
        FieldRule("windageMil", .number(minimum: nil, maximum: nil)),
        FieldRule("ammunitionId", .integer(minimum: 1), reference: .ammunition),
        FieldRule("notes", .string(maxLength: nil)),
    ])

    static let chrono = RecordSchema(fields: [
        FieldRule("clientId", .uuid, required: true),
        FieldRule("ammunitionId", .integer(minimum: 1), reference: .ammunition),
        FieldRule("ammoLotId", .integer(minimum: 1), reference: .ammoLot),
        FieldRule("chronographModel", .string(maxLength: nil)),
        FieldRule("distanceToChronograph", .integer(minimum: 0)),
        FieldRule("notes", .string(maxLength: nil)),
    ])

    static let reading = RecordSchema(fields: [
        FieldRule("clientId", .uuid, required: true),
        FieldRule("shotNumber", .integer(minimum: 1), required: true),
        FieldRule("velocity", .integer(minimum: 1), required: true),
        FieldRule("isExcluded", .boolean, required: true),
    ])

    static let group = RecordSchema(fields: [
        FieldRule("clientId", .uuid, required: true),
        FieldRule("groupNumber", .integer(minimum: 1), required: true),
        FieldRule("distance", .integer(minimum: 1), required: true),
        FieldRule("numberOfShots", .integer(minimum: 1), required: true),
        FieldRule("groupSizeMoa", .number(minimum: 0, maximum: nil)),
        FieldRule("meanRadiusMoa", .number(minimum: 0, maximum: nil)),
        FieldRule("ammunitionId", .integer(minimum: 1), reference: .ammunition),
        FieldRule("notes", .string(maxLength: nil)),
    ])

    static let measurement = RecordSchema(fields: [
        FieldRule("clientId", .uuid, required: true),
        FieldRule("holePositions", .points, required: true),
        FieldRule("bulletDiameter", .number(minimum: 0, maximum: nil, exclusiveMinimum: true), required: true),
        FieldRule("calibrationMethod", .string(maxLength: nil), required: true),
        FieldRule("measurementConfidence", .number(minimum: 0, maximum: 1)),
        FieldRule("horizontalSpread", .number(minimum: 0, maximum: nil)),
        FieldRule("verticalSpread", .number(minimum: 0, maximum: nil)),
        FieldRule("cep50", .number(minimum: 0, maximum: nil)),
    ])
}

/// A request body that passed its schema: the known fields, in schema order, ready to store.
struct ValidatedRecord: Sendable {
    let clientId: String
    /// The fields as a JSON object (unknown keys dropped), stored as-is and returned in the tree.
    let fieldsJSON: String
}

extension RecordSchema {
    /// Checks a parsed body against the schema: types, ranges, required fields, `null`s, then
    /// reference ids. Throws the first problem as 422 naming its field.
    func validate(_ body: JSONValue, references: ReferenceIDs) throws(APIError) -> ValidatedRecord {
        guard case .object = body else {
            throw APIError.validation("body", "must be a JSON object (was \(body.typeName))")
        }
        var kept: [(key: String, value: JSONValue)] = []
        kept.reserveCapacity(fields.count)
        var clientId = ""
        for rule in fields {
            guard let value = body[rule.name] else {
                if rule.required { throw APIError.validation(rule.name, "is required") }
                continue
            }
            let normalised = try Self.check(value, against: rule.type, field: rule.name)
            if rule.name == "clientId", case .string(let text) = normalised { clientId = text }
            kept.append((rule.name, normalised))
        }
        // References last: a request with a malformed field is a validation failure first.
        for rule in fields {
            guard let reference = rule.reference,
                case .integer(let id)? = kept.last(where: { $0.key == rule.name })?.value
            else { continue }
            guard reference.ids(in: references).contains(Int(id)) else {
                throw APIError.unknownReference(rule.name, Int(id))
            }
        }
        return ValidatedRecord(clientId: clientId, fieldsJSON: JSONValue.object(kept).jsonText)
    }

    /// Returns the value as stored (integers given as `3.0` become `3`), or throws 422.
    static func check(_ value: JSONValue, against type: FieldRule.ValueType, field: String) throws(APIError)
        -> JSONValue
    {
        if case .null = value { throw APIError.validation(field, "must not be null (leave the field out)") }
        switch type {
        case .uuid:
            guard case .string(let text) = value else {
                throw APIError.validation(field, "must be a string (was \(value.typeName))")
            }
            guard isUUID(text) else {
                throw APIError.validation(field, "must be a UUID (was \(text.debugDescription))")
            }
            return value
        case .dateTime:
            guard case .string(let text) = value else {
                throw APIError.validation(field, "must be a string (was \(value.typeName))")
            }
            guard isRFC3339DateTime(text) else {
                throw APIError.validation(field, "must be an RFC 3339 date-time (was \(text.debugDescription))")
            }
            return value
        case .integer(let minimum):
            let integer: Int64
            switch value {
            case .integer(let number): integer = number
            case .number(let number) where number.rounded() == number && abs(number) < 9.0e15: integer = Int64(number)
            case .number(let number): throw APIError.validation(field, "must be an integer (was \(number))")
            default: throw APIError.validation(field, "must be an integer (was \(value.typeName))")
            }
            guard integer >= minimum else { throw APIError.validation(field, "must be >= \(minimum) (was \(integer))") }
            return .integer(integer)
        case .number(let minimum, let maximum, let exclusiveMinimum):
            let number: Double
            switch value {
            case .integer(let integer): number = Double(integer)
            case .number(let double): number = double
            default: throw APIError.validation(field, "must be a number (was \(value.typeName))")
            }
            if let minimum {
                if exclusiveMinimum, !(number > minimum) {
                    throw APIError.validation(field, "must be > \(minimum.shortText) (was \(number.shortText))")
                }
                if !exclusiveMinimum, number < minimum {
                    throw APIError.validation(field, "must be >= \(minimum.shortText) (was \(number.shortText))")
                }
            }
            if let maximum, number > maximum {
                throw APIError.validation(field, "must be <= \(maximum.shortText) (was \(number.shortText))")
            }
            return value
        case .string(let maxLength):
            guard case .string(let text) = value else {
                throw APIError.validation(field, "must be a string (was \(value.typeName))")
            }
            if let maxLength, text.count > maxLength {
                throw APIError.validation(field, "must be at most \(maxLength) characters (was \(text.count))")
            }
            return value
        case .boolean:
            guard case .bool = value else {
                throw APIError.validation(field, "must be a boolean (was \(value.typeName))")
            }
            return value
        case .points:
            guard case .array(let items) = value else {
                throw APIError.validation(field, "must be an array (was \(value.typeName))")
            }
            var points: [JSONValue] = []
            points.reserveCapacity(items.count)
            for (index, item) in items.enumerated() {
                let path = "\(field)[\(index)]"
                guard case .object = item else {
                    throw APIError.validation(path, "must be an object (was \(item.typeName))")
                }
                var point: [(key: String, value: JSONValue)] = []
                for coordinate in ["x", "y"] {
                    guard let member = item[coordinate] else {
                        throw APIError.validation("\(path).\(coordinate)", "is required")
                    }
                    point.append(
                        (
                            coordinate,
                            try check(
                                member, against: .number(minimum: nil, maximum: nil), field: "\(path).\(coordinate)")
                        ))
                }
                points.append(.object(point))
            }
            return .array(points)
        }
    }
}

extension Double {
    /// `1` rather than `1.0` in messages about whole-number limits.
    var shortText: String { rounded() == self && abs(self) < 1e15 ? String(Int64(self)) : "\(self)" }
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, hex digits of either case.
func isUUID(_ text: String) -> Bool {
    let utf8 = text.utf8
    guard utf8.count == 36 else { return false }
    for (offset, byte) in utf8.enumerated() {
        switch offset {
        case 8, 13, 18, 23:
            if byte != UInt8(ascii: "-") { return false }
        default:
            if !byte.isHexDigit { return false }
        }
    }
    return true
}

/// RFC 3339 `date-time`: `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, with field ranges checked.
func isRFC3339DateTime(_ text: String) -> Bool {
    let bytes = Array(text.utf8)
    func number(_ start: Int, _ count: Int) -> Int? {
        guard start + count <= bytes.count else { return nil }
        var value = 0
        for byte in bytes[start..<start + count] {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }
    func byte(_ index: Int, is expected: Character) -> Bool {
        index < bytes.count && Character(Unicode.Scalar(bytes[index])).lowercased() == expected.lowercased()
    }
    guard number(0, 4) != nil, byte(4, is: "-"), let month = number(5, 2), (1...12).contains(month),
        byte(7, is: "-"), let day = number(8, 2), (1...31).contains(day),
        byte(10, is: "T"),
        let hour = number(11, 2), hour <= 23, byte(13, is: ":"),
        let minute = number(14, 2), minute <= 59, byte(16, is: ":"),
        let second = number(17, 2), second <= 60
    else { return false }
    var index = 19
    if byte(index, is: ".") {
        index += 1
        let start = index
        while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") { index += 1 }
        guard index > start else { return false }
    }
    if byte(index, is: "Z") { return index + 1 == bytes.count }
    guard byte(index, is: "+") || byte(index, is: "-"),
        let offsetHour = number(index + 1, 2), offsetHour <= 23, byte(index + 3, is: ":"),
        let offsetMinute = number(index + 4, 2), offsetMinute <= 59
    else { return false }
    return index + 6 == bytes.count
}

extension UInt8 {
    var isHexDigit: Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(self)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(self)
    }
}
