import DopeSync
import Testing

@Suite struct SessionValidatorTests {
    @Test func validDocumentDecodesToTheExpectedModel() throws {
        let document = try SessionValidator.validate(validSessionJSON.bytes).get()
        #expect(document.session == expectedValidSession)
    }

    @Test func imageReferencesFollowUploadOrder() throws {
        let document = try SessionValidator.decode(validSessionJSON.bytes)
        let group1 = "a0000000-0000-4000-8000-000000000001"
        let group3 = "a0000000-0000-4000-8000-000000000003"
        #expect(
            document.imageReferences == [
                .init(groupIndex: 0, groupId: group1, role: .photo, fileName: "g1-front.jpg"),
                .init(groupIndex: 0, groupId: group1, role: .photo, fileName: "g1 close up.heic"),
                .init(groupIndex: 0, groupId: group1, role: .original, fileName: "g1-original.png"),
                .init(groupIndex: 0, groupId: group1, role: .annotated, fileName: "g1-annotated.png"),
                .init(groupIndex: 2, groupId: group3, role: .photo, fileName: "g3.webp"),
                .init(groupIndex: 2, groupId: group3, role: .annotated, fileName: "g3-annotated.jpg"),
            ])
    }

    @Test func minimalDocumentWithEmptyArraysIsValid() throws {
        let minimal = #"""
            {"id":"00000000-0000-4000-8000-000000000000","createdAt":"2024-02-29T23:59:59.999999z",
             "sessionDate":"2026-05-04t09:30:00-00:00","rifleSetupId":1,
             "dopeEntries":[],"chronoSessions":[],"groupEntries":[]}
            """#
        let document = try SessionValidator.decode(minimal.bytes)
        #expect(document.session.locationId == nil)
        #expect(document.session.notes == nil)
        #expect(document.imageReferences.isEmpty)
    }

    @Test func nullOptionalFieldsAreAbsent() throws {
        let value = try parsedValidSession()
            .replacing("locationId", with: .null)
            .replacing("humidity", with: .null)
            .replacing("groupEntries[0].measurement.cep50", with: .null)
        let document = try SessionValidator.validate(parsed: value).get()
        #expect(document.session.locationId == nil)
        #expect(document.session.humidity == nil)
        #expect(document.session.groupEntries[0].measurement?.cep50 == nil)
    }

    /// Notes count Unicode scalars, as docs/api.yaml's `maxLength` does: 5,000 "é" written as
    /// e + combining accent are 5,000 Characters but 10,000 scalars, which is the limit.
    @Test(arguments: [(5_000, true), (5_001, false)])
    func notesCountUnicodeScalars(accentedLetters: Int, isValid: Bool) throws {
        let notes = String(repeating: "e\u{301}", count: accentedLetters)
        let value = try parsedValidSession().replacing("notes", with: .string(notes))
        let result = SessionValidator.validate(parsed: value)
        if isValid {
            #expect(try result.get().session.notes == notes)
        } else {
            #expect(result.issues.map(\.description) == ["notes: at most 10000 characters (was 10002)"])
        }
    }

    @Test func boundaryValuesAreAccepted() throws {
        let value = try parsedValidSession()
            .replacing("humidity", with: 0)
            .replacing("windDirection", with: 360)
            .replacing("notes", with: .string(String(repeating: "n", count: 10_000)))
            .replacing("chronoSessions[0].velocityReadings[0].shotNumber", with: 1)
            .replacing("groupEntries[0].measurement.measurementConfidence", with: 1)
            .replacing("groupEntries[0].measurement.cep50", with: 0)
            .replacing("groupEntries[0].imageFileNames[0]", with: .string(String(repeating: "x", count: 251) + ".jpg"))
            .replacing("rifleSetupId", with: .number(JSONNumber(Int.max)))
        #expect(throws: Never.self) { try SessionValidator.validate(parsed: value).get() }
    }

    struct BadField: Sendable, CustomTestStringConvertible {
        let change: String
        let value: JSONValue?
        let path: String
        let code: SessionIssue.Code
        let message: String

        var testDescription: String { "\(change) → \(code)" }
    }

    static let sessionID = "6f1c2a4e-8b3d-4c5e-9f7a-1b2c3d4e5f60"
    static let readingID = "c0000000-0000-4000-8000-000000000011"

    static func bad(
        _ change: String, _ value: JSONValue?, _ code: SessionIssue.Code, _ message: String, at path: String? = nil
    ) -> BadField {
        BadField(change: change, value: value, path: path ?? change, code: code, message: message)
    }

    /// One broken rule a row: the change to the valid document, then the issue it must cause.
    static let badFields: [BadField] = [
        // The session's identity and dates.
        bad("id", nil, .missingField, "required"),
        bad("id", .null, .missingField, "required"),
        bad("id", "not-a-uuid", .badUUID, #"must be a UUID (was "not-a-uuid")"#),
        bad(
            "id", "{6f1c2a4e-8b3d-4c5e-9f7a-1b2c3d4e5f60}", .badUUID,
            #"must be a UUID (was "{6f1c2a4e-8b3d-4c5e-9f7a-1b2c3d4e5f60}")"#),
        bad("id", 42, .wrongType, "must be a string (was 42)"),
        bad(
            "createdAt", "2026-05-04T09:30:00", .badDate,
            #"must be an RFC 3339 date with a time zone (was "2026-05-04T09:30:00")"#),
        bad(
            "createdAt", "2026-02-29T09:30:00Z", .badDate,
            #"must be an RFC 3339 date with a time zone (was "2026-02-29T09:30:00Z")"#),
        bad(
            "createdAt", "2026-05-04T09:30:60Z", .badDate,
            #"must be an RFC 3339 date with a time zone (was "2026-05-04T09:30:60Z")"#),
        bad(
            "sessionDate", "2026-05-04 09:30:00Z", .badDate,
            #"must be an RFC 3339 date with a time zone (was "2026-05-04 09:30:00Z")"#),
        bad(
            "sessionDate", "2026-05-04T09:30:00+2:00", .badDate,
            #"must be an RFC 3339 date with a time zone (was "2026-05-04T09:30:00+2:00")"#),
        bad("sessionDate", nil, .missingField, "required"),
        bad("sessionDate", 1_714_815_000, .wrongType, "must be a string (was 1714815000)"),
        // The session's numbers.
        bad("rifleSetupId", nil, .missingField, "required"),
        bad("rifleSetupId", 0, .outOfRange, "must be > 0 (was 0)"),
        bad("rifleSetupId", "12", .wrongType, #"must be an integer (was "12")"#),
        bad("rifleSetupId", .number(number("1.0")), .wrongType, "must be an integer (was 1.0)"),
        bad("rifleSetupId", .number(number("1e2")), .wrongType, "must be an integer (was 1e2)"),
        bad(
            "rifleSetupId", .number(number("9223372036854775808")), .outOfRange,
            "must fit in a 64-bit integer (was 9223372036854775808)"),
        bad("locationId", -3, .outOfRange, "must be > 0 (was -3)"),
        bad("notes", .string(String(repeating: "n", count: 10_001)), .tooLong, "at most 10000 characters (was 10001)"),
        bad("notes", true, .wrongType, "must be a string (was true)"),
        bad("humidity", 120, .outOfRange, "must be between 0 and 100 (was 120)"),
        bad("humidity", .number(number("-0.5")), .outOfRange, "must be between 0 and 100 (was -0.5)"),
        bad("windDirection", .number(number("360.5")), .outOfRange, "must be between 0 and 360 (was 360.5)"),
        bad("temperature", "warm", .wrongType, #"must be a number (was "warm")"#),
        // DOPE entries.
        bad("dopeEntries", nil, .missingField, "required"),
        bad("dopeEntries", ["x": 1], .wrongType, "must be an array (was an object)"),
        bad("dopeEntries[0]", "x", .wrongType, #"must be an object (was "x")"#),
        bad("dopeEntries[0].distance", .number(number("1.5")), .wrongType, "must be an integer (was 1.5)"),
        bad("dopeEntries[0].distance", nil, .missingField, "required"),
        bad(
            "dopeEntries[1].id", "d0000000-0000-4000-8000-000000000001", .duplicateID,
            "duplicate id (also at dopeEntries[0].id)"),
        bad("dopeEntries[0].ammunitionId", 0, .outOfRange, "must be > 0 (was 0)"),
        bad("dopeEntries[0].elevationMoa", "1", .wrongType, #"must be a number (was "1")"#),
        // Chrono sessions and readings.
        bad("chronoSessions", .null, .missingField, "required"),
        bad("chronoSessions[0].distanceToChronograph", -1, .outOfRange, "must be >= 0 (was -1)"),
        bad("chronoSessions[0].ammoLotId", 0, .outOfRange, "must be > 0 (was 0)"),
        bad(
            "chronoSessions[0].id", "c0000000-0000-4000-8000-00000000001", .badUUID,
            #"must be a UUID (was "c0000000-0000-4000-8000-00000000001")"#),
        bad("chronoSessions[1].velocityReadings", nil, .missingField, "required"),
        bad("chronoSessions[0].velocityReadings[1].shotNumber", 0, .outOfRange, "must be >= 1 (was 0)"),
        bad("chronoSessions[0].velocityReadings[0].velocity", 0, .outOfRange, "must be > 0 (was 0)"),
        bad("chronoSessions[0].velocityReadings[0].isExcluded", "no", .wrongType, #"must be a boolean (was "no")"#),
        bad("chronoSessions[0].velocityReadings[0].isExcluded", .null, .missingField, "required"),
        bad("chronoSessions[0].velocityReadings[1].id", .string(sessionID), .duplicateID, "duplicate id (also at id)"),
        // Groups.
        bad("groupEntries[0].groupNumber", 0, .outOfRange, "must be >= 1 (was 0)"),
        bad("groupEntries[0].numberOfShots", 0, .outOfRange, "must be >= 1 (was 0)"),
        bad("groupEntries[0].distance", .number(number("-0")), .outOfRange, "must be > 0 (was -0)"),
        bad("groupEntries[0].groupSizeMoa", .number(number("-0.1")), .outOfRange, "must be >= 0 (was -0.1)"),
        bad(
            "groupEntries[2].id", .string(readingID), .duplicateID,
            "duplicate id (also at chronoSessions[0].velocityReadings[0].id)"),
        bad("groupEntries[1].imageFileNames", nil, .missingField, "required"),
        bad("groupEntries[0].imageFileNames[1]", "../x.jpg", .badFileName, #"not a plain file name (was "../x.jpg")"#),
        bad(
            "groupEntries[0].imageFileNames[0]", #"photos\g1.jpg"#, .badFileName,
            #"not a plain file name (was "photos\\g1.jpg")"#),
        bad("groupEntries[0].imageFileNames[0]", "", .badFileName, #"not a plain file name (was "")"#),
        bad("groupEntries[0].imageFileNames[0]", "..", .badFileName, #"not a plain file name (was "..")"#),
        bad("groupEntries[0].imageFileNames[0]", ".", .badFileName, #"not a plain file name (was ".")"#),
        bad(
            "groupEntries[0].imageFileNames[0]", "a\u{0}.jpg", .badFileName,
            #"not a plain file name (was "a\u0000.jpg")"#),
        bad(
            "groupEntries[0].imageFileNames[0]", .string(String(repeating: "é", count: 128)), .badFileName,
            "at most 255 bytes of UTF-8 (was 256)"),
        bad("groupEntries[0].imageFileNames[0]", 7, .wrongType, "must be a string (was 7)"),
        // Measurements.
        bad("groupEntries[0].measurement", "x", .wrongType, #"must be an object (was "x")"#),
        bad("groupEntries[0].measurement.bulletDiameter", -1, .outOfRange, "must be > 0 (was -1)"),
        bad("groupEntries[0].measurement.bulletDiameter", 0, .outOfRange, "must be > 0 (was 0)"),
        bad("groupEntries[2].measurement.bulletDiameter", nil, .missingField, "required"),
        bad("groupEntries[2].measurement.calibrationMethod", nil, .missingField, "required"),
        bad("groupEntries[2].measurement.holePositions", nil, .missingField, "required"),
        bad("groupEntries[0].measurement.holePositions[1].y", nil, .missingField, "required"),
        bad("groupEntries[0].measurement.holePositions[0]", [1, 2], .wrongType, "must be an object (was an array)"),
        bad(
            "groupEntries[0].measurement.measurementConfidence", .number(number("1.01")), .outOfRange,
            "must be between 0 and 1 (was 1.01)"),
        bad("groupEntries[0].measurement.cep50", -1, .outOfRange, "must be >= 0 (was -1)"),
        bad("groupEntries[0].measurement.verticalSpread", [], .wrongType, "must be a number (was an array)"),
        bad(
            "groupEntries[0].measurement.originalImageFileName", "sub/dir.png", .badFileName,
            #"not a plain file name (was "sub/dir.png")"#),
        bad(
            "groupEntries[2].measurement.annotatedImageFileName", "..", .badFileName,
            #"not a plain file name (was "..")"#),
    ]

    @Test(arguments: badFields)
    func eachBrokenRuleIsReportedWithPathCodeAndMessage(_ row: BadField) throws {
        let value = try parsedValidSession().replacing(row.change, with: row.value)
        let issues = SessionValidator.validate(value.serialized()).issues
        try #require(issues.count == 1, "\(issues)")
        #expect(issues[0].path.description == row.path)
        #expect(issues[0].code == row.code)
        #expect(issues[0].message == row.message)
        #expect(issues[0].description == "\(row.path): \(row.message)")
    }

    struct BadDocument: Sendable, CustomTestStringConvertible {
        let name: String
        let bytes: [UInt8]
        let path: String
        let code: SessionIssue.Code
        let message: String

        var testDescription: String { name }
    }

    static let badDocuments: [BadDocument] = [
        BadDocument(
            name: "root is an array", bytes: "[]".bytes, path: "", code: .wrongType,
            message: "must be an object (was an array)"),
        BadDocument(
            name: "empty", bytes: [], path: "", code: .malformedJSON,
            message: "malformed JSON at line 1, column 1 (byte 0): the document ends where a value was expected"),
        BadDocument(
            name: "trailing comma", bytes: #"{"dopeEntries": [1,]}"#.bytes, path: "dopeEntries", code: .malformedJSON,
            message: "malformed JSON at line 1, column 20 (byte 19): a trailing comma is not allowed"),
        BadDocument(
            name: "invalid UTF-8", bytes: [0x7B, 0x22, 0x6E, 0xFF, 0x22, 0x3A, 0x31, 0x7D], path: "",
            code: .malformedJSON,
            message: "malformed JSON at line 1, column 4 (byte 3): byte 0xFF cannot start a UTF-8 sequence"),
        BadDocument(
            name: "duplicate key", bytes: "{\"groupEntries\": [{\"id\": 1,\n \"id\": 2}]}".bytes,
            path: "groupEntries[0].id", code: .duplicateKey,
            message: #"duplicate key "id" at line 2, column 2 (byte 29)"#),
    ]

    @Test(arguments: badDocuments)
    func documentsThatAreNotSessionObjectsAreRefused(_ row: BadDocument) {
        let issues = SessionValidator.validate(row.bytes).issues
        #expect(issues.map(\.path.description) == [row.path])
        #expect(issues.map(\.code) == [row.code])
        #expect(issues.map(\.message) == [row.message])
    }

    @Test func documentsOverTheSizeLimitAreRefusedBeforeParsing() {
        let notJSON = [UInt8](repeating: 0xFF, count: 101)
        let issues = SessionValidator.validate(notJSON, maxBytes: 100).issues
        #expect(issues == [SessionIssue(path: .root, code: .tooLarge, message: "must be at most 100 bytes (was 101)")])
    }

    @Test func everyIssueOfADocumentIsReported() {
        let document = #"""
            {"id":"x","createdAt":"2026-05-04T09:30:00","rifleSetupId":1.5,"humidity":120,"notes":5,
             "dopeEntries":[{"id":"A1B2C3D4-0000-4000-8000-000000000001","distance":0},
                            {"id":"a1b2c3d4-0000-4000-8000-000000000001","distance":1}],
             "chronoSessions":null,
             "groupEntries":[{"id":"a1b2c3d4-0000-4000-8000-000000000002","groupNumber":1,"distance":100,
               "numberOfShots":5,"imageFileNames":["ok.jpg","../x.jpg"],
               "measurement":{"holePositions":[{"x":1}],"bulletDiameter":-1,"calibrationMethod":"ruler"}}]}
            """#
        let error = SessionValidator.validate(document.bytes).error
        #expect(
            error?.description == """
                id: must be a UUID (was "x")
                createdAt: must be an RFC 3339 date with a time zone (was "2026-05-04T09:30:00")
                sessionDate: required
                rifleSetupId: must be an integer (was 1.5)
                notes: must be a string (was 5)
                humidity: must be between 0 and 100 (was 120)
                dopeEntries[0].distance: must be > 0 (was 0)
                dopeEntries[1].id: duplicate id (also at dopeEntries[0].id)
                chronoSessions: required
                groupEntries[0].imageFileNames[1]: not a plain file name (was "../x.jpg")
                groupEntries[0].measurement.holePositions[0].y: required
                groupEntries[0].measurement.bulletDiameter: must be > 0 (was -1)
                """)
        #expect(
            error?.issues.map(\.code) == [
                .badUUID, .badDate, .missingField, .wrongType, .wrongType, .outOfRange, .outOfRange,
                .duplicateID, .missingField, .badFileName, .missingField, .outOfRange,
            ])
    }

    @Test func longOffendingValuesAreShortenedInMessages() throws {
        let value = try parsedValidSession().replacing("id", with: .string(String(repeating: "z", count: 500)))
        let message = try #require(SessionValidator.validate(parsed: value).issues.first?.message)
        #expect(message == "must be a UUID (was \"\(String(repeating: "z", count: 64))…\")")
    }

    @Test func issueCodesAreStableStrings() {
        let codes: [SessionIssue.Code] = [
            .missingField, .wrongType, .outOfRange, .duplicateID, .badDate, .badUUID, .badFileName, .tooLong,
            .malformedJSON, .duplicateKey, .tooLarge,
        ]
        #expect(
            codes.map(\.description) == [
                "missing_field", "wrong_type", "out_of_range", "duplicate_id", "bad_date", "bad_uuid",
                "bad_file_name", "too_long", "malformed_json", "duplicate_key", "too_large",
            ])
    }
}

extension Result where Failure == SessionValidationError {
    var issues: [SessionIssue] {
        if case .failure(let error) = self { error.issues } else { [] }
    }

    var error: SessionValidationError? {
        if case .failure(let error) = self { error } else { nil }
    }
}
