import DopeSyncSupport

/// Walks a parsed `session.json`, building the model and collecting every issue on the way.
/// A record with an issue yields nil, but its siblings and the rest of its fields are still
/// read, so one pass reports everything.
final class SessionDecoder {
    private(set) var issues: [SessionIssue] = []
    /// The first path at which each canonical id appeared, to name it in duplicate reports.
    private var idPaths: [String: JSONPath] = [:]

    static let maxSessionNotesScalars = 10_000

    // MARK: Records

    func session(_ value: JSONValue) -> SessionDocument.Session? {
        guard let record = record(value, at: .root) else { return nil }
        let id = record.id()
        let createdAt = record.date("createdAt")
        let sessionDate = record.date("sessionDate")
        let rifleSetupId = record.integer("rifleSetupId", required: true, .greaterThanZero)
        let locationId = record.integer("locationId", .greaterThanZero)
        let notes = record.string("notes", maxScalars: Self.maxSessionNotesScalars)
        let temperature = record.number("temperature")
        let humidity = record.number("humidity", .between(0, 100))
        let pressure = record.number("pressure")
        let windSpeed = record.number("windSpeed")
        let windDirection = record.number("windDirection", .between(0, 360))
        let altitude = record.number("altitude")
        let dopeEntries = record.array("dopeEntries", element: dopeEntry)
        let chronoSessions = record.array("chronoSessions", element: chronoSession)
        let groupEntries = record.array("groupEntries", element: groupEntry)
        guard let id, let createdAt, let sessionDate, let rifleSetupId,
            let dopeEntries, let chronoSessions, let groupEntries
        else { return nil }
        return SessionDocument.Session(
            id: id, createdAt: createdAt, sessionDate: sessionDate, rifleSetupId: rifleSetupId,
            locationId: locationId, notes: notes, temperature: temperature, humidity: humidity,
            pressure: pressure, windSpeed: windSpeed, windDirection: windDirection, altitude: altitude,
            dopeEntries: dopeEntries, chronoSessions: chronoSessions, groupEntries: groupEntries)
    }

    func dopeEntry(_ value: JSONValue, at path: JSONPath) -> SessionDocument.DopeEntry? {
        guard let record = record(value, at: path) else { return nil }
        let id = record.id()
        let distance = record.integer("distance", required: true, .greaterThanZero)
        let elevationMoa = record.number("elevationMoa")
        let elevationMil = record.number("elevationMil")
        let windageMoa = record.number("windageMoa")
        let windageMil = record.number("windageMil")
        let ammunitionId = record.integer("ammunitionId", .greaterThanZero)
        let notes = record.string("notes")
        guard let id, let distance else { return nil }
        return SessionDocument.DopeEntry(
            id: id, distance: distance, elevationMoa: elevationMoa, elevationMil: elevationMil,
            windageMoa: windageMoa, windageMil: windageMil, ammunitionId: ammunitionId, notes: notes)
    }

    func chronoSession(_ value: JSONValue, at path: JSONPath) -> SessionDocument.ChronoSession? {
        guard let record = record(value, at: path) else { return nil }
        let id = record.id()
        let ammunitionId = record.integer("ammunitionId", .greaterThanZero)
        let ammoLotId = record.integer("ammoLotId", .greaterThanZero)
        let chronographModel = record.string("chronographModel")
        let distanceToChronograph = record.integer("distanceToChronograph", .atLeastZero)
        let notes = record.string("notes")
        let velocityReadings = record.array("velocityReadings", element: velocityReading)
        guard let id, let velocityReadings else { return nil }
        return SessionDocument.ChronoSession(
            id: id, ammunitionId: ammunitionId, ammoLotId: ammoLotId, chronographModel: chronographModel,
            distanceToChronograph: distanceToChronograph, notes: notes, velocityReadings: velocityReadings)
    }

    func velocityReading(_ value: JSONValue, at path: JSONPath) -> SessionDocument.VelocityReading? {
        guard let record = record(value, at: path) else { return nil }
        let id = record.id()
        let shotNumber = record.integer("shotNumber", required: true, .atLeastOne)
        let velocity = record.integer("velocity", required: true, .greaterThanZero)
        let isExcluded = record.bool("isExcluded")
        guard let id, let shotNumber, let velocity, let isExcluded else { return nil }
        return SessionDocument.VelocityReading(
            id: id, shotNumber: shotNumber, velocity: velocity, isExcluded: isExcluded)
    }

    func groupEntry(_ value: JSONValue, at path: JSONPath) -> SessionDocument.GroupEntry? {
        guard let record = record(value, at: path) else { return nil }
        let id = record.id()
        let groupNumber = record.integer("groupNumber", required: true, .atLeastOne)
        let distance = record.integer("distance", required: true, .greaterThanZero)
        let numberOfShots = record.integer("numberOfShots", required: true, .atLeastOne)
        let groupSizeMoa = record.number("groupSizeMoa", .atLeastZero)
        let meanRadiusMoa = record.number("meanRadiusMoa", .atLeastZero)
        let ammunitionId = record.integer("ammunitionId", .greaterThanZero)
        let notes = record.string("notes")
        let imageFileNames = record.array("imageFileNames", element: fileName)
        let measurementField = record.field("measurement", required: false)
        let measurement = measurementField.flatMap { groupMeasurement($0.value, at: $0.path) }
        guard let id, let groupNumber, let distance, let numberOfShots, let imageFileNames,
            measurementField == nil || measurement != nil
        else { return nil }
        return SessionDocument.GroupEntry(
            id: id, groupNumber: groupNumber, distance: distance, numberOfShots: numberOfShots,
            groupSizeMoa: groupSizeMoa, meanRadiusMoa: meanRadiusMoa, ammunitionId: ammunitionId,
            notes: notes, imageFileNames: imageFileNames, measurement: measurement)
    }

    func groupMeasurement(_ value: JSONValue, at path: JSONPath) -> SessionDocument.GroupMeasurement? {
        guard let record = record(value, at: path) else { return nil }
        let holePositions = record.array("holePositions", element: holePosition)
        let bulletDiameter = record.number("bulletDiameter", required: true, .greaterThanZero)
        let calibrationMethod = record.string("calibrationMethod", required: true)
        let measurementConfidence = record.number("measurementConfidence", .between(0, 1))
        let horizontalSpread = record.number("horizontalSpread", .atLeastZero)
        let verticalSpread = record.number("verticalSpread", .atLeastZero)
        let cep50 = record.number("cep50", .atLeastZero)
        let originalImageFileName = record.field("originalImageFileName", required: false).flatMap {
            fileName($0.value, at: $0.path)
        }
        let annotatedImageFileName = record.field("annotatedImageFileName", required: false).flatMap {
            fileName($0.value, at: $0.path)
        }
        guard let holePositions, let bulletDiameter, let calibrationMethod else { return nil }
        return SessionDocument.GroupMeasurement(
            holePositions: holePositions, bulletDiameter: bulletDiameter, calibrationMethod: calibrationMethod,
            measurementConfidence: measurementConfidence, horizontalSpread: horizontalSpread,
            verticalSpread: verticalSpread, cep50: cep50,
            originalImageFileName: originalImageFileName, annotatedImageFileName: annotatedImageFileName)
    }

    func holePosition(_ value: JSONValue, at path: JSONPath) -> SessionDocument.HolePosition? {
        guard let record = record(value, at: path) else { return nil }
        let x = record.number("x", required: true)
        let y = record.number("y", required: true)
        guard let x, let y else { return nil }
        return SessionDocument.HolePosition(x: x, y: y)
    }

    // MARK: Values

    func report(_ path: JSONPath, _ code: SessionIssue.Code, _ message: String) {
        issues.append(SessionIssue(path: path, code: code, message: message))
    }

    func reportWrongType(_ value: JSONValue, expected: String, at path: JSONPath) {
        report(path, .wrongType, "must be \(expected) (was \(Self.describe(value)))")
    }

    func record(_ value: JSONValue, at path: JSONPath) -> RecordReader? {
        guard case .object(let object) = value else {
            reportWrongType(value, expected: "an object", at: path)
            return nil
        }
        return RecordReader(object: object, path: path, decoder: self)
    }

    func string(_ value: JSONValue, at path: JSONPath) -> String? {
        guard case .string(let string) = value else {
            reportWrongType(value, expected: "a string", at: path)
            return nil
        }
        return string
    }

    func number(_ value: JSONValue, at path: JSONPath, _ rule: NumericRule) -> JSONNumber? {
        guard case .number(let number) = value else {
            reportWrongType(value, expected: "a number", at: path)
            return nil
        }
        return check(number, against: rule, at: path) ? number : nil
    }

    func integer(_ value: JSONValue, at path: JSONPath, _ rule: NumericRule) -> Int? {
        guard case .number(let number) = value, number.isIntegerLiteral else {
            reportWrongType(value, expected: "an integer", at: path)
            return nil
        }
        guard let integer = number.intValue else {
            report(path, .outOfRange, "must fit in a 64-bit integer (was \(Self.abbreviated(number.literal)))")
            return nil
        }
        return check(number, against: rule, at: path) ? integer : nil
    }

    private func check(_ number: JSONNumber, against rule: NumericRule, at path: JSONPath) -> Bool {
        guard rule.accepts(number.doubleValue) else {
            report(path, .outOfRange, "\(rule.requirement) (was \(Self.abbreviated(number.literal)))")
            return false
        }
        return true
    }

    func bool(_ value: JSONValue, at path: JSONPath) -> Bool? {
        guard case .bool(let bool) = value else {
            reportWrongType(value, expected: "a boolean", at: path)
            return nil
        }
        return bool
    }

    /// A UUID, returned in canonical form and remembered, so a second use anywhere is reported.
    func id(_ value: JSONValue, at path: JSONPath) -> String? {
        guard let text = string(value, at: path) else { return nil }
        guard let id = SessionFieldFormats.canonicalUUID(text) else {
            report(path, .badUUID, "must be a UUID (was \(Self.describe(value)))")
            return nil
        }
        if let firstPath = idPaths[id] {
            report(path, .duplicateID, "duplicate id (also at \(firstPath))")
            return nil
        }
        idPaths[id] = path
        return id
    }

    func date(_ value: JSONValue, at path: JSONPath) -> String? {
        guard let text = string(value, at: path) else { return nil }
        guard SessionFieldFormats.isRFC3339DateTime(text) else {
            report(path, .badDate, "must be an RFC 3339 date with a time zone (was \(Self.describe(value)))")
            return nil
        }
        return text
    }

    func fileName(_ value: JSONValue, at path: JSONPath) -> String? {
        guard let name = string(value, at: path) else { return nil }
        switch SessionFieldFormats.fileNameProblem(name) {
        case nil:
            return name
        case .notPlain:
            report(path, .badFileName, "not a plain file name (was \(Self.describe(value)))")
        case .controlCharacter:
            report(
                path, .badFileName,
                "holds a control character (a line break, a tab, ESC…), which no file name may (was \(Self.describe(value)))"
            )
        case .tooLong:
            report(
                path, .badFileName,
                "at most \(FileSystem.maxNameBytes) bytes of UTF-8 (was \(name.utf8.count))")
        }
        return nil
    }

    // MARK: Describing values in messages

    /// A value as it would appear in the document, shortened: issues must stay one short line.
    static func describe(_ value: JSONValue) -> String {
        switch value {
        case .null: "null"
        case .bool(let bool): String(bool)
        case .number(let number): abbreviated(number.literal)
        case .string(let string): String(decoding: JSONValue.string(abbreviated(string)).serialized(), as: UTF8.self)
        case .array: "an array"
        case .object: "an object"
        }
    }

    static func abbreviated(_ text: String, limit: Int = 64) -> String {
        guard text.unicodeScalars.count > limit else { return text }
        var prefix = ""
        prefix.unicodeScalars.append(contentsOf: text.unicodeScalars.prefix(limit))
        return prefix + "…"
    }
}

/// A numeric requirement and its wording in messages.
struct NumericRule: Sendable {
    /// Empty for `any`, which never fails.
    let requirement: String
    let accepts: @Sendable (Double) -> Bool

    static let any = NumericRule(requirement: "", accepts: { _ in true })
    static let greaterThanZero = NumericRule(requirement: "must be > 0", accepts: { $0 > 0 })
    static let atLeastZero = NumericRule(requirement: "must be >= 0", accepts: { $0 >= 0 })
    static let atLeastOne = NumericRule(requirement: "must be >= 1", accepts: { $0 >= 1 })

    static func between(_ lowest: Int, _ highest: Int) -> NumericRule {
        NumericRule(
            requirement: "must be between \(lowest) and \(highest)",
            accepts: { Double(lowest) <= $0 && $0 <= Double(highest) })
    }
}

/// One JSON object being read as a record: looks fields up by key and hands their values to
/// the decoder's checks with the right path.
struct RecordReader {
    let object: JSONObject
    let path: JSONPath
    let decoder: SessionDecoder

    /// The field's value and path; nil when absent or `null` (reported when required).
    func field(_ key: String, required: Bool) -> (value: JSONValue, path: JSONPath)? {
        let fieldPath = path.appending(key)
        switch object[key] {
        case nil, .null?:
            if required { decoder.report(fieldPath, .missingField, "required") }
            return nil
        case let value?:
            return (value, fieldPath)
        }
    }

    func id() -> String? {
        field("id", required: true).flatMap { decoder.id($0.value, at: $0.path) }
    }

    func date(_ key: String) -> String? {
        field(key, required: true).flatMap { decoder.date($0.value, at: $0.path) }
    }

    func bool(_ key: String) -> Bool? {
        field(key, required: true).flatMap { decoder.bool($0.value, at: $0.path) }
    }

    func integer(_ key: String, required: Bool = false, _ rule: NumericRule) -> Int? {
        field(key, required: required).flatMap { decoder.integer($0.value, at: $0.path, rule) }
    }

    func number(_ key: String, required: Bool = false, _ rule: NumericRule = .any) -> JSONNumber? {
        field(key, required: required).flatMap { decoder.number($0.value, at: $0.path, rule) }
    }

    func string(_ key: String, required: Bool = false, maxScalars: Int? = nil) -> String? {
        guard let (value, fieldPath) = field(key, required: required),
            let string = decoder.string(value, at: fieldPath)
        else { return nil }
        let count = string.unicodeScalars.count
        if let maxScalars, count > maxScalars {
            decoder.report(fieldPath, .tooLong, "at most \(maxScalars) characters (was \(count))")
            return nil
        }
        return string
    }

    /// A required array; nil when it is missing, not an array, or any element has an issue
    /// (every element is still read).
    func array<Element>(_ key: String, element: (JSONValue, JSONPath) -> Element?) -> [Element]? {
        guard let (value, fieldPath) = field(key, required: true) else { return nil }
        guard case .array(let values) = value else {
            decoder.reportWrongType(value, expected: "an array", at: fieldPath)
            return nil
        }
        var elements: [Element] = []
        var isComplete = true
        for (index, value) in values.enumerated() {
            if let decoded = element(value, fieldPath.appending(index: index)) {
                elements.append(decoded)
            } else {
                isComplete = false
            }
        }
        return isComplete ? elements : nil
    }
}
