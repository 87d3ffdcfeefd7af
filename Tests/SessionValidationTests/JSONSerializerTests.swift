import DopeSync
import Testing

@Suite struct JSONSerializerTests {
    @Test func serializingAParsedDocumentAndParsingItAgainGivesTheSameValue() throws {
        let value = try parsedValidSession()
        let bytes = value.serialized()
        #expect(try JSONValue.parse(bytes) == value)
        #expect(try JSONValue.parse(bytes).serialized() == bytes)
    }

    @Test(arguments: [
        #"{"b":1,"a":[true,false,null],"c":{},"d":[]}"#,
        #"[1.50,-0,1e2,1E+2,-1.25e-3,123456789012345678901234567890,0.1]"#,
        #"{"nested":{"deeper":[{"x":"y"}]},"":""}"#,
        "\"é 🎯 \u{2028} /\"",
    ])
    func compactDocumentsComeBackByteForByte(json: String) throws {
        #expect(try JSONValue.parse(json.bytes).serialized() == json.bytes)
    }

    @Test func membersAreWrittenInTheCallersOrder() {
        let body: JSONValue = ["clientId": "6f1c2a4e-8b3d-4c5e-9f7a-1b2c3d4e5f60", "distance": 100, "notes": "zero"]
        let reordered: JSONValue = [
            "notes": "zero", "distance": 100, "clientId": "6f1c2a4e-8b3d-4c5e-9f7a-1b2c3d4e5f60",
        ]
        #expect(
            String(decoding: body.serialized(), as: UTF8.self)
                == #"{"clientId":"6f1c2a4e-8b3d-4c5e-9f7a-1b2c3d4e5f60","distance":100,"notes":"zero"}"#)
        #expect(
            String(decoding: reordered.serialized(), as: UTF8.self)
                == #"{"notes":"zero","distance":100,"clientId":"6f1c2a4e-8b3d-4c5e-9f7a-1b2c3d4e5f60"}"#)
    }

    @Test func theSameValueAlwaysGivesTheSameBytes() throws {
        let document = try SessionValidator.decode(validSessionJSON.bytes)
        func body() -> JSONValue {
            let session = document.session
            var object: JSONObject = ["clientId": .string(session.id), "sessionDate": .string(session.sessionDate)]
            object["rifleSetupId"] = .number(JSONNumber(session.rifleSetupId))
            object["windSpeed"] = session.windSpeed.map(JSONValue.number)
            object["humidity"] = session.humidity.map(JSONValue.number)
            object["locationId"] = nil
            return .object(object)
        }
        let first = body().serialized()
        #expect((0..<10).allSatisfy { _ in body().serialized() == first })
        #expect(
            String(decoding: first, as: UTF8.self)
                == #"{"clientId":"6f1c2a4e-8b3d-4c5e-9f7a-1b2c3d4e5f60","sessionDate":"2026-05-04T11:30:00.250+02:00","rifleSetupId":12,"windSpeed":4.0,"humidity":62}"#
        )
    }

    @Test func stringsGetOnlyTheEscapesJSONRequires() {
        let value = JSONValue.string(
            "quote \" backslash \\ newline \n tab \t bell \u{7} unit \u{1F} slash / é \u{2028} del \u{7F}")
        #expect(
            String(decoding: value.serialized(), as: UTF8.self)
                == #""quote \" backslash \\ newline \n tab \t bell \u0007 unit \u001f slash / é "# + "\u{2028}"
                + " del \u{7F}\"")
    }

    @Test func numbersBuiltFromSwiftValuesHaveValidLiterals() throws {
        #expect(JSONNumber(42).literal == "42")
        #expect(JSONNumber(-7).literal == "-7")
        #expect(try #require(JSONNumber(1.5)).literal == "1.5")
        #expect(try #require(JSONNumber(100.0)).literal == "100.0")
        #expect(try #require(JSONNumber(0.00001)).literal == "1e-05")
        #expect(JSONNumber(Double.nan) == nil)
        #expect(JSONNumber(Double.infinity) == nil)
        for number in [JSONNumber(Int.min), try #require(JSONNumber(1e300)), try #require(JSONNumber(-0.0))] {
            #expect(JSONNumber(literal: number.literal) == number)
        }
    }

    @Test func numbersCompareByLiteral() {
        #expect(JSONNumber(literal: "1.0") != JSONNumber(literal: "1"))
        #expect(JSONNumber(literal: "1.0")?.doubleValue == JSONNumber(literal: "1")?.doubleValue)
    }

    @Test(arguments: [
        (JSONPath.root, ""),
        (
            JSONPath.root.appending("groupEntries").appending(index: 2).appending("measurement").appending(
                "bulletDiameter"),
            "groupEntries[2].measurement.bulletDiameter"
        ),
        (JSONPath.root.appending(index: 0).appending(index: 1), "[0][1]"),
        (JSONPath.root.appending("a").appending("odd.key").appending(""), #"a["odd.key"][""]"#),
    ])
    func pathsRenderAsPeopleWriteThem(path: JSONPath, text: String) {
        #expect(path.description == text)
    }
}
