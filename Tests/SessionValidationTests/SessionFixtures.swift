import DopeSync

/// A realistic, valid `session.json`: every optional field, nested chrono readings, groups
/// with and without measurements and images, client bookkeeping and an unknown key, an
/// uppercase session id as iOS writes it, and `null` for optional fields.
let validSessionJSON = #"""
    {
      "id": "6F1C2A4E-8B3D-4C5E-9F7A-1B2C3D4E5F60",
      "createdAt": "2026-05-04T09:30:00Z",
      "sessionDate": "2026-05-04T11:30:00.250+02:00",
      "rifleSetupId": 12,
      "locationId": 3,
      "notes": "Calm morning, mirage from 10:00. \u00dcn\u00efc\u00f6d\u00e9 🎯",
      "temperature": 18.5,
      "humidity": 62,
      "pressure": 29.92,
      "windSpeed": 4.0,
      "windDirection": 270,
      "altitude": -12.5,
      "syncAttempts": 3,
      "lastSyncError": {"code": "offline", "at": "yesterday"},
      "appVersion": "2.4.1",
      "dopeEntries": [
        {"id": "d0000000-0000-4000-8000-000000000001", "distance": 100, "elevationMoa": 0,
         "elevationMil": 0.0, "windageMoa": -0.25, "windageMil": -0.07, "ammunitionId": 7, "notes": "zero"},
        {"id": "d0000000-0000-4000-8000-000000000002", "distance": 600, "elevationMoa": 1.5e1, "notes": null}
      ],
      "chronoSessions": [
        {"id": "c0000000-0000-4000-8000-000000000001", "ammunitionId": 7, "ammoLotId": 21,
         "chronographModel": "Garmin Xero C1", "distanceToChronograph": 0, "notes": "cold bore first",
         "velocityReadings": [
           {"id": "c0000000-0000-4000-8000-000000000011", "shotNumber": 1, "velocity": 2710, "isExcluded": true},
           {"id": "c0000000-0000-4000-8000-000000000012", "shotNumber": 2, "velocity": 2695, "isExcluded": false}
         ]},
        {"id": "c0000000-0000-4000-8000-000000000002", "velocityReadings": []}
      ],
      "groupEntries": [
        {"id": "a0000000-0000-4000-8000-000000000001", "groupNumber": 1, "distance": 100, "numberOfShots": 5,
         "groupSizeMoa": 0.85, "meanRadiusMoa": 0.31, "ammunitionId": 7, "notes": "best of day",
         "imageFileNames": ["g1-front.jpg", "g1 close up.heic"],
         "measurement": {"holePositions": [{"x": 0.12, "y": -0.3}, {"x": -0.05, "y": 0.21}],
           "bulletDiameter": 0.308, "calibrationMethod": "target_grid", "measurementConfidence": 0.92,
           "horizontalSpread": 0.41, "verticalSpread": 0.52, "cep50": 0.18,
           "originalImageFileName": "g1-original.png", "annotatedImageFileName": "g1-annotated.png"}},
        {"id": "a0000000-0000-4000-8000-000000000002", "groupNumber": 2, "distance": 300, "numberOfShots": 3,
         "imageFileNames": [], "measurement": null},
        {"id": "a0000000-0000-4000-8000-000000000003", "groupNumber": 3, "distance": 600, "numberOfShots": 10,
         "imageFileNames": ["g3.webp"],
         "measurement": {"holePositions": [], "bulletDiameter": 0.264, "calibrationMethod": "manual",
           "annotatedImageFileName": "g3-annotated.jpg"}}
      ]
    }
    """#

/// A number with exactly this literal.
func number(_ literal: String) -> JSONNumber {
    guard let number = JSONNumber(literal: literal) else {
        preconditionFailure("not a JSON number literal: \(literal)")
    }
    return number
}

let expectedValidSession = SessionDocument.Session(
    id: "6f1c2a4e-8b3d-4c5e-9f7a-1b2c3d4e5f60",
    createdAt: "2026-05-04T09:30:00Z",
    sessionDate: "2026-05-04T11:30:00.250+02:00",
    rifleSetupId: 12,
    locationId: 3,
    notes: "Calm morning, mirage from 10:00. Ünïcödé 🎯",
    temperature: number("18.5"),
    humidity: number("62"),
    pressure: number("29.92"),
    windSpeed: number("4.0"),
    windDirection: number("270"),
    altitude: number("-12.5"),
    dopeEntries: [
        SessionDocument.DopeEntry(
            id: "d0000000-0000-4000-8000-000000000001", distance: 100,
            elevationMoa: number("0"), elevationMil: number("0.0"),
            windageMoa: number("-0.25"), windageMil: number("-0.07"), ammunitionId: 7, notes: "zero"),
        SessionDocument.DopeEntry(
            id: "d0000000-0000-4000-8000-000000000002", distance: 600, elevationMoa: number("1.5e1")),
    ],
    chronoSessions: [
        SessionDocument.ChronoSession(
            id: "c0000000-0000-4000-8000-000000000001", ammunitionId: 7, ammoLotId: 21,
            chronographModel: "Garmin Xero C1", distanceToChronograph: 0, notes: "cold bore first",
            velocityReadings: [
                SessionDocument.VelocityReading(
                    id: "c0000000-0000-4000-8000-000000000011", shotNumber: 1, velocity: 2710, isExcluded: true),
                SessionDocument.VelocityReading(
                    id: "c0000000-0000-4000-8000-000000000012", shotNumber: 2, velocity: 2695, isExcluded: false),
            ]),
        SessionDocument.ChronoSession(id: "c0000000-0000-4000-8000-000000000002"),
    ],
    groupEntries: [
        SessionDocument.GroupEntry(
            id: "a0000000-0000-4000-8000-000000000001", groupNumber: 1, distance: 100, numberOfShots: 5,
            groupSizeMoa: number("0.85"), meanRadiusMoa: number("0.31"), ammunitionId: 7, notes: "best of day",
            imageFileNames: ["g1-front.jpg", "g1 close up.heic"],
            measurement: SessionDocument.GroupMeasurement(
                holePositions: [
                    SessionDocument.HolePosition(x: number("0.12"), y: number("-0.3")),
                    SessionDocument.HolePosition(x: number("-0.05"), y: number("0.21")),
                ],
                bulletDiameter: number("0.308"), calibrationMethod: "target_grid",
                measurementConfidence: number("0.92"), horizontalSpread: number("0.41"),
                verticalSpread: number("0.52"), cep50: number("0.18"),
                originalImageFileName: "g1-original.png", annotatedImageFileName: "g1-annotated.png")),
        SessionDocument.GroupEntry(
            id: "a0000000-0000-4000-8000-000000000002", groupNumber: 2, distance: 300, numberOfShots: 3),
        SessionDocument.GroupEntry(
            id: "a0000000-0000-4000-8000-000000000003", groupNumber: 3, distance: 600, numberOfShots: 10,
            imageFileNames: ["g3.webp"],
            measurement: SessionDocument.GroupMeasurement(
                holePositions: [], bulletDiameter: number("0.264"), calibrationMethod: "manual",
                annotatedImageFileName: "g3-annotated.jpg")),
    ]
)

func parsedValidSession() throws -> JSONValue {
    try JSONValue.parse(Array(validSessionJSON.utf8))
}

extension JSONValue {
    /// A copy with the value at `path` (`groupEntries[0].measurement.bulletDiameter`) replaced,
    /// or removed when `newValue` is nil. Missing object members are added.
    func replacing(_ path: String, with newValue: JSONValue?) -> JSONValue {
        replacing(Self.components(of: path)[...], with: newValue)
    }

    private func replacing(_ components: ArraySlice<JSONPath.Component>, with newValue: JSONValue?) -> JSONValue {
        guard let first = components.first else {
            preconditionFailure("cannot remove the root")
        }
        let rest = components.dropFirst()
        switch (self, first) {
        case (.object(var object), .key(let key)):
            object[key] = rest.isEmpty ? newValue : object[key]?.replacing(rest, with: newValue)
            return .object(object)
        case (.array(var elements), .index(let index)):
            if rest.isEmpty, newValue == nil {
                elements.remove(at: index)
            } else {
                elements[index] = rest.isEmpty ? newValue! : elements[index].replacing(rest, with: newValue)
            }
            return .array(elements)
        default:
            preconditionFailure("path does not match the document at \(first)")
        }
    }

    private static func components(of path: String) -> [JSONPath.Component] {
        path.split(separator: ".").flatMap { part -> [JSONPath.Component] in
            let pieces = part.split(separator: "[")
            let key = pieces.first.map { JSONPath.Component.key(String($0)) }
            let indices = pieces.dropFirst().map { JSONPath.Component.index(Int($0.dropLast())!) }
            return (key.map { [$0] } ?? []) + indices
        }
    }
}

extension String {
    var bytes: [UInt8] { Array(utf8) }
}
