/// What the server holds of one session, from `GET /api/sessions/{id}` (docs/api.yaml's SessionTree),
/// indexed by the step keys of `UploadPlan`: the look before a step is sent again.
///
/// A value, built from the answer's bytes and asked about steps; no I/O, so every rule of the
/// match is tested on its own. Records match by `clientId` (a measurement by its group's),
/// images by group, role and file name, and then their content is compared with the step's:
/// a record found with other content is never overwritten (the API is create-only), the bundle
/// fails naming the record and the field.
struct ServerTree: Sendable, Equatable {
    /// A record found on the server: its id, and the fields to compare with the step's body.
    struct Record: Sendable, Equatable {
        var id: Int64
        var fields: JSONObject
    }

    /// By step key (`session`, `dope:<id>`, `image:<group>:<role>:<file>`, …).
    private(set) var records: [String: Record] = [:]

    /// How a step stands against the tree.
    enum Match: Sendable, Equatable {
        /// Not on the server: send it (again).
        case absent
        /// On the server with the same content: record this id and send nothing.
        case present(id: Int64)
        /// On the server with other content: the bundle fails; this names the field.
        case differs(id: Int64, field: String, server: String, bundle: String)
    }

    /// Parses a SessionTree; nil when the bytes are not one (then nothing can be said).
    init?(json bytes: some Collection<UInt8>) {
        guard let session = (try? JSONValue.parse(bytes))?.objectValue else { return nil }
        guard add("session", session) else { return nil }
        for dope in session["dope"]?.arrayValue ?? [] {
            add(dope.objectValue, key: { "dope:\($0)" })
        }
        for chrono in session["chrono"]?.arrayValue ?? [] {
            add(chrono.objectValue, key: { "chrono:\($0)" })
            for reading in chrono.objectValue?["readings"]?.arrayValue ?? [] {
                add(reading.objectValue, key: { "reading:\($0)" })
            }
        }
        for group in session["groups"]?.arrayValue ?? [] {
            guard let group = group.objectValue, let groupID = group["clientId"]?.stringValue else { continue }
            add(group, key: { "group:\($0)" })
            add(group["measurement"]?.objectValue, key: { _ in "measurement:\(groupID)" })
            for image in group["images"]?.arrayValue ?? [] {
                guard let image = image.objectValue, let role = image["role"]?.stringValue,
                    let fileName = image["fileName"]?.stringValue
                else { continue }
                add("image:\(groupID):\(role):\(fileName)", image)
            }
        }
    }

    /// Indexes a record under the key its `clientId` gives; the first one wins (a duplicate made
    /// by a server that ignored keys must not hide the original).
    private mutating func add(_ object: JSONObject?, key: (String) -> String) {
        guard let object, let clientID = object["clientId"]?.stringValue else { return }
        add(key(clientID), object)
    }

    @discardableResult
    private mutating func add(_ key: String, _ object: JSONObject) -> Bool {
        guard records[key] == nil, let id = object["id"]?.numberValue, id.isIntegerLiteral,
            let value = Int64(id.literal)
        else {
            return records[key] != nil
        }
        records[key] = Record(id: value, fields: object)
        return true
    }

    /// The session's own server id.
    var sessionID: Int64? { records["session"]?.id }

    /// Whether `step` is on the server, and with the same content.
    func match(_ step: UploadStep) -> Match {
        guard let record = records[step.key] else { return .absent }
        switch step.payload {
        case .json(let bytes):
            // Our own request body, made by the serializer: always an object; if not, nothing to compare.
            guard let body = (try? JSONValue.parse(bytes))?.objectValue else { return .present(id: record.id) }
            // Only what the server shows can be compared: a field it does not echo is not a difference.
            for member in body.members where member.key != "clientId" {
                guard let server = record.fields[member.key] else { continue }
                guard Self.same(server, member.value) else {
                    return .differs(
                        id: record.id, field: member.key,
                        server: String(decoding: server.serialized(), as: UTF8.self),
                        bundle: String(decoding: member.value.serialized(), as: UTF8.self))
                }
            }
            return .present(id: record.id)
        case .image(let image, _, _):
            let sha256 = record.fields["sha256"]?.stringValue
            guard sha256?.lowercased() == image.sha256 else {
                return .differs(id: record.id, field: "sha256", server: sha256 ?? "absent", bundle: image.sha256)
            }
            return .present(id: record.id)
        }
    }

    /// Equal as values: numbers by value (`1.0` is `1`) and dates by instant (`…T11:30:00.250+02:00`
    /// is `…T09:30:00.25Z`), as a server may write both its own way; everything else exactly.
    private static func same(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.number(let x), .number(let y)): x.doubleValue == y.doubleValue
        case (.string(let x), .string(let y)) where x != y:
            SessionFieldFormats.instant(x).map { $0 == SessionFieldFormats.instant(y) } ?? false
        case (.array(let x), .array(let y)): x.count == y.count && zip(x, y).allSatisfy { same($0, $1) }
        case (.object(let x), .object(let y)):
            x.members.count == y.members.count
                && x.members.allSatisfy { member in y[member.key].map { same(member.value, $0) } ?? false }
        default: a == b
        }
    }
}
