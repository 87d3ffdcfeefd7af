import Crypto
import DopeSyncBundle
import DopeSyncSupport

/// Builds an ``UploadPlan``'s steps, one record at a time, in plan order.
struct StepBuilder {
    let sessionID: String
    private(set) var steps: [UploadStep] = []

    init(sessionID: String) { self.sessionID = sessionID }

    /// A JSON record. `references`: (where `session.json` has the record, the kind, the field, the
    /// id if the record names one).
    mutating func addRecord(
        _ kind: UploadStep.Kind, key: String, parent: UploadStep.Parent, path: String, body: JSONObject,
        references: [(place: String, kind: ReferenceUse.Kind, field: String, id: Int?)] = []
    ) {
        let bytes = JSONValue.object(body).serialized()
        steps.append(
            UploadStep(
                kind: kind, key: key, parent: parent, payload: .json(bytes),
                idempotencyKey: UploadPlan.idempotencyKey(sessionID: sessionID, stepKey: key),
                clientID: body["clientId"]?.stringValue ?? "", contentDigest: SHA256.hash(data: bytes).hexString,
                references: references.compactMap { place, kind, field, id in
                    id.map {
                        ReferenceUse(kind, id: Int64($0), field: "\(path).\(field)", bundleField: "\(place).\(field)")
                    }
                },
                recordPath: path))
    }

    /// An image, streamed from the archive in a multipart body.
    mutating func addImage(_ image: BundleImage, reference: SessionDocument.ImageReference) {
        let key = "image:\(reference.groupId):\(reference.role.rawValue):\(reference.fileName)"
        let digestInput = "image\n\(reference.role.rawValue)\n\(reference.fileName)\n\(image.sha256)"
        steps.append(
            UploadStep(
                kind: .image, key: key, parent: .group(stepKey: "group:\(reference.groupId)"),
                payload: .image(image, role: reference.role.rawValue, groupID: reference.groupId),
                idempotencyKey: UploadPlan.idempotencyKey(sessionID: sessionID, stepKey: key),
                clientID: reference.groupId, contentDigest: SHA256.hash(data: Array(digestInput.utf8)).hexString,
                recordPath: "groups[\(reference.groupIndex)].images[\(reference.fileName)]"))
    }
}

/// The request body of each kind of record, as docs/api.yaml names its fields.
enum RecordBody {
    static func session(_ session: SessionDocument.Session) -> JSONObject {
        var body = JSONObject()
        body["clientId"] = .string(session.id)
        body["sessionDate"] = .string(session.sessionDate)
        body["rifleSetupId"] = .number(JSONNumber(session.rifleSetupId))
        body["locationId"] = session.locationId.map { .number(JSONNumber($0)) }
        body["notes"] = session.notes.map { .string($0) }
        body["temperature"] = session.temperature.map { .number($0) }
        body["humidity"] = session.humidity.map { .number($0) }
        body["pressure"] = session.pressure.map { .number($0) }
        body["windSpeed"] = session.windSpeed.map { .number($0) }
        body["windDirection"] = session.windDirection.map { .number($0) }
        body["altitude"] = session.altitude.map { .number($0) }
        return body
    }

    static func dope(_ entry: SessionDocument.DopeEntry) -> JSONObject {
        var body = JSONObject()
        body["clientId"] = .string(entry.id)
        body["distance"] = .number(JSONNumber(entry.distance))
        body["elevationMoa"] = entry.elevationMoa.map { .number($0) }
        body["elevationMil"] = entry.elevationMil.map { .number($0) }
        body["windageMoa"] = entry.windageMoa.map { .number($0) }
        body["windageMil"] = entry.windageMil.map { .number($0) }
        body["ammunitionId"] = entry.ammunitionId.map { .number(JSONNumber($0)) }
        body["notes"] = entry.notes.map { .string($0) }
        return body
    }

    static func chrono(_ chrono: SessionDocument.ChronoSession) -> JSONObject {
        var body = JSONObject()
        body["clientId"] = .string(chrono.id)
        body["ammunitionId"] = chrono.ammunitionId.map { .number(JSONNumber($0)) }
        body["ammoLotId"] = chrono.ammoLotId.map { .number(JSONNumber($0)) }
        body["chronographModel"] = chrono.chronographModel.map { .string($0) }
        body["distanceToChronograph"] = chrono.distanceToChronograph.map { .number(JSONNumber($0)) }
        body["notes"] = chrono.notes.map { .string($0) }
        return body
    }

    static func reading(_ reading: SessionDocument.VelocityReading) -> JSONObject {
        var body = JSONObject()
        body["clientId"] = .string(reading.id)
        body["shotNumber"] = .number(JSONNumber(reading.shotNumber))
        body["velocity"] = .number(JSONNumber(reading.velocity))
        body["isExcluded"] = .bool(reading.isExcluded)
        return body
    }

    static func group(_ group: SessionDocument.GroupEntry) -> JSONObject {
        var body = JSONObject()
        body["clientId"] = .string(group.id)
        body["groupNumber"] = .number(JSONNumber(group.groupNumber))
        body["distance"] = .number(JSONNumber(group.distance))
        body["numberOfShots"] = .number(JSONNumber(group.numberOfShots))
        body["groupSizeMoa"] = group.groupSizeMoa.map { .number($0) }
        body["meanRadiusMoa"] = group.meanRadiusMoa.map { .number($0) }
        body["ammunitionId"] = group.ammunitionId.map { .number(JSONNumber($0)) }
        body["notes"] = group.notes.map { .string($0) }
        return body
    }

    static func measurement(_ measurement: SessionDocument.GroupMeasurement, groupID: String) -> JSONObject {
        var body = JSONObject()
        body["clientId"] = .string(groupID)
        body["holePositions"] = .array(
            measurement.holePositions.map { .object(["x": .number($0.x), "y": .number($0.y)]) })
        body["bulletDiameter"] = .number(measurement.bulletDiameter)
        body["calibrationMethod"] = .string(measurement.calibrationMethod)
        body["measurementConfidence"] = measurement.measurementConfidence.map { .number($0) }
        body["horizontalSpread"] = measurement.horizontalSpread.map { .number($0) }
        body["verticalSpread"] = measurement.verticalSpread.map { .number($0) }
        body["cep50"] = measurement.cep50.map { .number($0) }
        return body
    }
}
