import Crypto
import DopeSyncBundle
import DopeSyncSupport
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
    /// the server's lists before the bundle's first request (`ReferenceCatalog`).
    public var references: [ReferenceUse] = []
    /// Where the record is, as a failure's `field` names it: `session`, `dope[2]`,
    /// `chrono[0].readings[3]`, `groups[1].measurement`, `groups[1].images[target.jpg]`.
    public var recordPath: String = ""

    /// The request path, given the server ids already known by step key; nil while a parent
    /// the path needs has no server id yet.
    public func path(serverIDs: [String: Int64]) -> String? {
        path { serverIDs[$0].map(String.init) }
    }

    /// The request path with each server id it needs named by the step that creates it
    /// (`/api/groups/{group:g1}/images`): known before any of those ids is, and the same in every
    /// run. What a step's intent records, so the intents of steps whose parents are not created
    /// yet are committed with the others, ahead.
    public var pathNamingParents: String {
        path { "{\($0)}" }!
    }

    /// The path, with `id` giving each server id it needs by step key (nil: not known yet).
    private func path(_ id: (String) -> String?) -> String? {
        let parentID = parentStepKey.flatMap(id)
        switch (kind, parentID) {
        case (.session, _): return "/api/sessions"
        case (.dope, let id?): return "/api/sessions/\(id)/dope"
        case (.chrono, let id?): return "/api/sessions/\(id)/chrono"
        case (.group, let id?): return "/api/sessions/\(id)/groups"
        case (.reading, let chronoID?):
            guard let sessionID = id("session") else { return nil }
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

/// The steps of one bundle, in the order docs/api.md gives: the session; every DOPE entry;
/// every chrono session followed by its readings; every group followed by its measurement;
/// then every image (per group: photos, original, annotated).
public struct UploadPlan: Sendable {
    public let sessionID: String
    public let steps: [UploadStep]

    /// The steps of a validated bundle. Validation guarantees every image a record names is among
    /// `images`; should that ever break, the plan is refused (`missing_image`) rather than a
    /// bundle uploaded short of an image and moved to `done/`.
    public init(session document: SessionDocument, images: [String: BundleImage]) throws(BundleError) {
        var builder = Self.records(of: document)
        for reference in document.imageReferences {
            guard let image = images[reference.fileName] else {
                throw BundleError(
                    .missingImage, culprit: reference.fileName,
                    message:
                        "a record names this image, but it is not among the images read: refused rather than uploaded without it"
                )
            }
            builder.addImage(image, reference: reference)
        }
        sessionID = document.session.id
        steps = builder.steps
    }

    /// The JSON steps of a session's records, in plan order, without its images.
    public static func recordSteps(of document: SessionDocument) -> [UploadStep] { records(of: document).steps }

    private static func records(of document: SessionDocument) -> StepBuilder {
        let session = document.session
        var builder = StepBuilder(sessionID: session.id)
        builder.addRecord(
            .session, key: "session", parent: .none, path: "session", body: RecordBody.session(session),
            references: [
                ("session", .rifleSetup, "rifleSetupId", session.rifleSetupId),
                ("session", .location, "locationId", session.locationId),
            ])
        for (index, entry) in session.dopeEntries.enumerated() {
            builder.addRecord(
                .dope, key: "dope:\(entry.id)", parent: .session, path: "dope[\(index)]", body: RecordBody.dope(entry),
                references: [("dopeEntries[\(index)]", .ammunition, "ammunitionId", entry.ammunitionId)])
        }
        for (index, chrono) in session.chronoSessions.enumerated() {
            let chronoKey = "chrono:\(chrono.id)"
            let place = "chronoSessions[\(index)]"
            builder.addRecord(
                .chrono, key: chronoKey, parent: .session, path: "chrono[\(index)]", body: RecordBody.chrono(chrono),
                references: [
                    (place, .ammunition, "ammunitionId", chrono.ammunitionId),
                    (place, .ammoLot, "ammoLotId", chrono.ammoLotId),
                ])
            for (readingIndex, reading) in chrono.velocityReadings.enumerated() {
                builder.addRecord(
                    .reading, key: "reading:\(reading.id)", parent: .chrono(stepKey: chronoKey),
                    path: "chrono[\(index)].readings[\(readingIndex)]", body: RecordBody.reading(reading))
            }
        }
        for (index, group) in session.groupEntries.enumerated() {
            let groupKey = "group:\(group.id)"
            builder.addRecord(
                .group, key: groupKey, parent: .session, path: "groups[\(index)]", body: RecordBody.group(group),
                references: [("groupEntries[\(index)]", .ammunition, "ammunitionId", group.ammunitionId)])
            if let measurement = group.measurement {
                builder.addRecord(
                    .measurement, key: "measurement:\(group.id)", parent: .group(stepKey: groupKey),
                    path: "groups[\(index)].measurement", body: RecordBody.measurement(measurement, groupID: group.id))
            }
        }
        return builder
    }

    /// Derived only from the bundle's own ids: the same after a crash, a requeue or a lost
    /// checkpoint database. Hashed, because a step key with a 255-byte file name would pass
    /// the header's 255-character limit.
    package static func idempotencyKey(sessionID: String, stepKey: String) -> String {
        "dopesync-v1-" + SHA256.hash(data: Array("\(sessionID)\n\(stepKey)".utf8)).hexString
    }
}
