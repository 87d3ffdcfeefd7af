import Crypto
import Foundation

/// One upload request of a bundle: what to send, where, and under which idempotency key.
///
/// Everything here is derived from the bundle alone, so the same bundle gives the same steps,
/// byte for byte, after a crash, a requeue or a lost checkpoint database.
public struct UploadStep: Sendable, Equatable {
    public enum Kind: String, Sendable { case session, dope, chrono, reading, group, measurement, image }

    /// The server id a step's path needs, named by the step that created it.
    public enum Parent: Sendable, Equatable {
        case none
        case session
        case chrono(stepKey: String)
        case group(stepKey: String)
    }

    public enum Payload: Sendable, Equatable {
        /// A JSON body, its exact bytes.
        case json([UInt8])
        /// A multipart/form-data body around an image streamed from the archive.
        case image(BundleImage, role: String, groupID: String)
    }

    public let kind: Kind
    /// The checkpoint key: `session`, `dope:<id>`, `chrono:<id>`, `reading:<id>`, `group:<id>`,
    /// `measurement:<groupId>`, `image:<groupId>:<role>:<fileName>`.
    public let key: String
    public let parent: Parent
    public let payload: Payload
    public let idempotencyKey: String
    /// The `clientId` the request sends (for an image or a measurement, its group's id): a create's
    /// answer must name it, or it is not the answer to this request.
    public let clientID: String
    /// SHA-256 of what the record says; a done step whose digest changed is `changed_after_upload`.
    public let contentDigest: String
    /// The ids of records the server must already have that this record names, checked against
    /// the server's lists before the bundle's first request (``ReferenceCatalog``).
    public var references: [ReferenceUse] = []

    /// The request path, given the server ids already known by step key; nil while a parent
    /// the path needs has no server id yet.
    public func path(serverIDs: [String: Int64]) -> String? {
        let parentID = parentStepKey.flatMap { serverIDs[$0] }
        switch (kind, parentID) {
        case (.session, _): return "/api/sessions"
        case (.dope, let id?): return "/api/sessions/\(id)/dope"
        case (.chrono, let id?): return "/api/sessions/\(id)/chrono"
        case (.group, let id?): return "/api/sessions/\(id)/groups"
        case (.reading, let chronoID?):
            guard let sessionID = serverIDs["session"] else { return nil }
            return "/api/sessions/\(sessionID)/chrono/\(chronoID)/readings"
        case (.measurement, let id?): return "/api/groups/\(id)/measurement"
        case (.image, let id?): return "/api/groups/\(id)/images"
        default: return nil
        }
    }

    /// The parent's step key, whose server id goes into the path.
    public var parentStepKey: String? {
        switch parent {
        case .none: nil
        case .session: "session"
        case .chrono(let key), .group(let key): key
        }
    }
}

/// The steps of one bundle, in the order WORKER.md prescribes: the session; every DOPE entry;
/// every chrono session followed by its readings; every group followed by its measurement;
/// then every image (per group: photos, original, annotated).
public struct UploadPlan: Sendable {
    public let sessionID: String
    public let steps: [UploadStep]

    public init(session document: SessionDocument, images: [String: BundleImage]) {
        let session = document.session
        sessionID = session.id
        var steps: [UploadStep] = []
        func add(
            _ kind: UploadStep.Kind, _ key: String, _ parent: UploadStep.Parent, _ body: JSONObject,
            references: [ReferenceUse] = []
        ) {
            let bytes = JSONValue.object(body).serialized()
            steps.append(
                UploadStep(
                    kind: kind, key: key, parent: parent, payload: .json(bytes),
                    idempotencyKey: Self.idempotencyKey(sessionID: session.id, stepKey: key),
                    clientID: body["clientId"]?.stringValue ?? "",
                    contentDigest: SHA256.hash(data: bytes).hexString, references: references
                ))
        }
        /// The uses of the ids a record names, named as WORKER.md names them (`dope[2].ammunitionId`).
        func uses(
            _ record: String, _ index: Int?, _ array: String, _ ids: [(ReferenceUse.Kind, String, Int?)]
        ) -> [ReferenceUse] {
            let place = index.map { "[\($0)]" } ?? ""
            return ids.compactMap { kind, name, id in
                id.map {
                    ReferenceUse(
                        kind, id: Int64($0), field: "\(record)\(place).\(name)", bundleField: "\(array)\(place).\(name)"
                    )
                }
            }
        }

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
        add(
            .session, "session", .none, body,
            references: uses(
                "session", nil, "session",
                [(.rifleSetup, "rifleSetupId", session.rifleSetupId), (.location, "locationId", session.locationId)]))

        for (index, entry) in session.dopeEntries.enumerated() {
            var body = JSONObject()
            body["clientId"] = .string(entry.id)
            body["distance"] = .number(JSONNumber(entry.distance))
            body["elevationMoa"] = entry.elevationMoa.map { .number($0) }
            body["elevationMil"] = entry.elevationMil.map { .number($0) }
            body["windageMoa"] = entry.windageMoa.map { .number($0) }
            body["windageMil"] = entry.windageMil.map { .number($0) }
            body["ammunitionId"] = entry.ammunitionId.map { .number(JSONNumber($0)) }
            body["notes"] = entry.notes.map { .string($0) }
            add(
                .dope, "dope:\(entry.id)", .session, body,
                references: uses("dope", index, "dopeEntries", [(.ammunition, "ammunitionId", entry.ammunitionId)]))
        }

        for (index, chrono) in session.chronoSessions.enumerated() {
            var body = JSONObject()
            body["clientId"] = .string(chrono.id)
            body["ammunitionId"] = chrono.ammunitionId.map { .number(JSONNumber($0)) }
            body["ammoLotId"] = chrono.ammoLotId.map { .number(JSONNumber($0)) }
            body["chronographModel"] = chrono.chronographModel.map { .string($0) }
            body["distanceToChronograph"] = chrono.distanceToChronograph.map { .number(JSONNumber($0)) }
            body["notes"] = chrono.notes.map { .string($0) }
            let chronoKey = "chrono:\(chrono.id)"
            add(
                .chrono, chronoKey, .session, body,
                references: uses(
                    "chrono", index, "chronoSessions",
                    [(.ammunition, "ammunitionId", chrono.ammunitionId), (.ammoLot, "ammoLotId", chrono.ammoLotId)]))
            for reading in chrono.velocityReadings {
                var body = JSONObject()
                body["clientId"] = .string(reading.id)
                body["shotNumber"] = .number(JSONNumber(reading.shotNumber))
                body["velocity"] = .number(JSONNumber(reading.velocity))
                body["isExcluded"] = .bool(reading.isExcluded)
                add(.reading, "reading:\(reading.id)", .chrono(stepKey: chronoKey), body)
            }
        }

        for (index, group) in session.groupEntries.enumerated() {
            var body = JSONObject()
            body["clientId"] = .string(group.id)
            body["groupNumber"] = .number(JSONNumber(group.groupNumber))
            body["distance"] = .number(JSONNumber(group.distance))
            body["numberOfShots"] = .number(JSONNumber(group.numberOfShots))
            body["groupSizeMoa"] = group.groupSizeMoa.map { .number($0) }
            body["meanRadiusMoa"] = group.meanRadiusMoa.map { .number($0) }
            body["ammunitionId"] = group.ammunitionId.map { .number(JSONNumber($0)) }
            body["notes"] = group.notes.map { .string($0) }
            let groupKey = "group:\(group.id)"
            add(
                .group, groupKey, .session, body,
                references: uses("groups", index, "groupEntries", [(.ammunition, "ammunitionId", group.ammunitionId)]))
            if let measurement = group.measurement {
                var body = JSONObject()
                body["clientId"] = .string(group.id)
                body["holePositions"] = .array(
                    measurement.holePositions.map { .object(["x": .number($0.x), "y": .number($0.y)]) })
                body["bulletDiameter"] = .number(measurement.bulletDiameter)
                body["calibrationMethod"] = .string(measurement.calibrationMethod)
                body["measurementConfidence"] = measurement.measurementConfidence.map { .number($0) }
                body["horizontalSpread"] = measurement.horizontalSpread.map { .number($0) }
                body["verticalSpread"] = measurement.verticalSpread.map { .number($0) }
                body["cep50"] = measurement.cep50.map { .number($0) }
                add(.measurement, "measurement:\(group.id)", .group(stepKey: groupKey), body)
            }
        }

        for reference in document.imageReferences {
            guard let image = images[reference.fileName] else { continue }  // validation guarantees it
            let key = "image:\(reference.groupId):\(reference.role.rawValue):\(reference.fileName)"
            let digestInput = "image\n\(reference.role.rawValue)\n\(reference.fileName)\n\(image.sha256)"
            steps.append(
                UploadStep(
                    kind: .image, key: key, parent: .group(stepKey: "group:\(reference.groupId)"),
                    payload: .image(image, role: reference.role.rawValue, groupID: reference.groupId),
                    idempotencyKey: Self.idempotencyKey(sessionID: session.id, stepKey: key),
                    clientID: reference.groupId,
                    contentDigest: SHA256.hash(data: Array(digestInput.utf8)).hexString
                ))
        }
        self.steps = steps
    }

    /// Derived only from the bundle's own ids: the same after a crash, a requeue or a lost
    /// checkpoint database. Hashed, because a step key with a 255-byte file name would pass
    /// the header's 255-character limit.
    static func idempotencyKey(sessionID: String, stepKey: String) -> String {
        "dopesync-v1-" + SHA256.hash(data: Array("\(sessionID)\n\(stepKey)".utf8)).hexString
    }
}

/// The multipart/form-data framing of an image upload. Deterministic, so a step sent again is
/// byte-for-byte the same request, and a boundary that provably occurs in no part:
/// - the text parts are a UUID, a role and a file name without control characters (validation),
///   and a delimiter starts with CR LF;
/// - the image: its boundary is `dopesync-` and 32 hex digits of its key's hash, unless
///   validation saw ``boundaryMarker`` (`--dopesync-`) anywhere in its bytes; then the boundary
///   also hashes the image's SHA-256, which no file can contain without knowing its own hash.
///   What a producer computes from a bundle's ids is thus either absent or not the boundary;
/// - bytes rewritten after validation are searched while they stream (``MultipartBody``).
struct MultipartFraming: Sendable {
    /// Whatever begins a delimiter of a boundary made from a key alone.
    static let boundaryMarker = "--dopesync-"

    let boundary: String
    let head: [UInt8]
    let tail: [UInt8]

    init(idempotencyKey: String, groupID: String, role: String, image: BundleImage) {
        let seed = image.holdsBoundaryMarker ? "\(idempotencyKey)\n\(image.sha256)" : idempotencyKey
        let boundary = "dopesync-" + String(SHA256.hash(data: Array(seed.utf8)).hexString.prefix(32))
        self.boundary = boundary
        func field(_ name: String, _ value: String) -> String {
            "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"\r\n\r\n\(value)\r\n"
        }
        // RFC 7578 4.2 (as browsers do): a quote in a quoted file name is written %22.
        let quotedName = image.fileName.replacingOccurrences(of: "\"", with: "%22")
        let text =
            field("clientId", groupID) + field("role", role) + field("fileName", image.fileName)
            + "--\(boundary)\r\nContent-Disposition: form-data; name=\"file\"; filename=\"\(quotedName)\"\r\n"
            + "Content-Type: \(image.type.contentType)\r\n\r\n"
        head = Array(text.utf8)
        tail = Array("\r\n--\(boundary)--\r\n".utf8)
    }

    var contentType: String { "multipart/form-data; boundary=\(boundary)" }

    /// What must never occur in the image's bytes as sent: its delimiter, less the CR LF.
    var delimiter: String { "--" + boundary }

    func contentLength(imageSize: Int64) -> Int64 { Int64(head.count) + imageSize + Int64(tail.count) }
}
