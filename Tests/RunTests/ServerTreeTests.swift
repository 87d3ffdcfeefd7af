import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// The look before a resend, as a value: a session tree as docs/api.yaml gives it, asked about the
/// steps of a plan. No server, no disk.
@Suite struct ServerTreeTests {
    /// A plan for `sample` (images of `sample`, recognised as the reader would).
    static func plan(_ sample: SampleSession) throws -> UploadPlan {
        guard case .success(let document) = SessionValidator.validate(sample.sessionBytes, maxBytes: 1 << 20) else {
            throw SessionValidationError(issues: [])
        }
        var images: [String: BundleImage] = [:]
        for (index, (name, bytes)) in sample.images.sorted(by: { $0.key < $1.key }).enumerated() {
            images[name] = BundleImage(
                fileName: name, entryPath: "images/\(name)", size: Int64(bytes.count), sha256: sha256Hex(bytes),
                type: ImageType(sniffing: bytes)!, ordinal: index)
        }
        return try UploadPlan(session: document, images: images)
    }

    /// The tree a server that stored every step of `plan` would answer, ids from 1 in plan order;
    /// `edit` changes a record's stored fields by step key first.
    static func tree(of plan: UploadPlan, edit: (String, inout [String: Any]) -> Void = { _, _ in }) -> [UInt8] {
        var fields: [String: [String: Any]] = [:]
        var ids: [String: Int] = [:]
        for (index, step) in plan.steps.enumerated() {
            ids[step.key] = index + 1
            var object: [String: Any]
            switch step.payload {
            case .json(let bytes): object = try! JSONSerialization.jsonObject(with: Data(bytes)) as! [String: Any]
            case .image(let image, let role, _):
                object = ["fileName": image.fileName, "role": role, "size": image.size, "sha256": image.sha256]
            }
            object["id"] = index + 1
            edit(step.key, &object)
            fields[step.key] = object
        }
        func children(_ prefix: String, parent: String?) -> [[String: Any]] {
            plan.steps.filter { $0.key.hasPrefix(prefix) && (parent == nil || $0.parentStepKey == parent) }.map {
                fields[$0.key]!
            }
        }
        var session = fields["session"]!
        session["dope"] = children("dope:", parent: nil)
        session["chrono"] = children("chrono:", parent: nil).map { chrono -> [String: Any] in
            var chrono = chrono
            chrono["readings"] = children("reading:", parent: "chrono:\(chrono["clientId"]!)")
            return chrono
        }
        session["groups"] = children("group:", parent: nil).map { group -> [String: Any] in
            var group = group
            let id = group["clientId"] as! String
            if let measurement = fields["measurement:\(id)"] { group["measurement"] = measurement }
            group["images"] = children("image:\(id):", parent: nil)
            return group
        }
        return Array(try! JSONSerialization.data(withJSONObject: session))
    }

    @Test("every step of a stored session is found with its server id, none differs")
    func everyStepFound() throws {
        let plan = try Self.plan(SampleSession(seed: 1))
        let tree = try #require(ServerTree(json: Self.tree(of: plan)))
        #expect(tree.sessionID == 1)
        for (index, step) in plan.steps.enumerated() {
            #expect(tree.match(step) == .present(id: Int64(index + 1)), "\(step.key)")
        }
    }

    @Test("a record the server lacks is absent; so is every step of an empty session")
    func missingRecordsAreAbsent() throws {
        let plan = try Self.plan(SampleSession(seed: 2))
        let dope = try #require(plan.steps.first { $0.kind == .dope })
        var bytes = Self.tree(of: plan)
        var object = try JSONSerialization.jsonObject(with: Data(bytes)) as! [String: Any]
        object["dope"] = (object["dope"] as! [[String: Any]]).filter { "dope:\($0["clientId"]!)" != dope.key }
        bytes = Array(try JSONSerialization.data(withJSONObject: object))
        let tree = try #require(ServerTree(json: bytes))
        #expect(tree.match(dope) == .absent)

        let empty = try #require(
            ServerTree(json: Array(#"{"id": 9, "clientId": "x", "dope": [], "chrono": [], "groups": []}"#.utf8)))
        #expect(plan.steps.dropFirst().allSatisfy { empty.match($0) == .absent })
    }

    @Test("a record with other content differs, naming the field and both values")
    func otherContentDiffers() throws {
        let plan = try Self.plan(SampleSession(seed: 3))
        let dope = try #require(plan.steps.first { $0.kind == .dope })
        let tree = try #require(
            ServerTree(
                json: Self.tree(of: plan) { key, fields in
                    if key == dope.key { fields["distance"] = 999 }
                }))
        guard case .differs(_, let field, let server, _) = tree.match(dope) else {
            Issue.record("expected differs, got \(tree.match(dope))")
            return
        }
        #expect(field == "distance")
        #expect(server == "999")
    }

    @Test("an image with other bytes differs by its SHA-256; one with the same bytes is found")
    func imagesMatchByHash() throws {
        let plan = try Self.plan(SampleSession(seed: 4))
        let images = plan.steps.filter { $0.kind == .image }
        let changed = try #require(images.first)
        let tree = try #require(
            ServerTree(
                json: Self.tree(of: plan) { key, fields in
                    if key == changed.key { fields["sha256"] = String(repeating: "0", count: 64) }
                }))
        guard case .differs(_, "sha256", _, _) = tree.match(changed) else {
            Issue.record("expected the sha256 to differ, got \(tree.match(changed))")
            return
        }
        #expect(images.dropFirst().allSatisfy { if case .present = tree.match($0) { true } else { false } })
    }

    @Test("numbers compare by value, as a server may write them its own way (1.5 and 1.50, 100 and 100.0)")
    func numbersByValue() throws {
        let plan = try Self.plan(SampleSession(seed: 5))
        var text = String(decoding: Self.tree(of: plan), as: UTF8.self)
        // Wherever "distance" falls in its object (the tree's keys come in no fixed order).
        text = text.replacingOccurrences(of: "\"distance\":100,", with: "\"distance\":100.0,")
            .replacingOccurrences(of: "\"distance\":100}", with: "\"distance\":100.0}")
        #expect(text.contains("\"distance\":100.0"))
        let tree = try #require(ServerTree(json: Array(text.utf8)))
        #expect(plan.steps.allSatisfy { if case .present = tree.match($0) { true } else { false } })
    }

    @Test("a record stored twice (by a server that ignored a key) matches its first copy")
    func duplicatesMatchTheFirst() throws {
        let plan = try Self.plan(SampleSession(seed: 6))
        let dope = try #require(plan.steps.first { $0.kind == .dope })
        var object = try JSONSerialization.jsonObject(with: Data(Self.tree(of: plan))) as! [String: Any]
        var entries = object["dope"] as! [[String: Any]]
        var copy = entries.first { "dope:\($0["clientId"]!)" == dope.key }!
        copy["id"] = 500
        entries.append(copy)
        object["dope"] = entries
        let tree = try #require(ServerTree(json: Array(try JSONSerialization.data(withJSONObject: object))))
        guard case .present(let id) = tree.match(dope) else {
            Issue.record("expected present")
            return
        }
        #expect(id != 500)
    }
}

extension ServerTreeTests {
    @Test("dates compare by instant, as a server may write them with another offset or fraction")
    func datesByInstant() throws {
        let sample = SampleSession(seed: 7)  // sessionDate 2026-05-04T11:30:00.250+02:00
        let plan = try Self.plan(sample)
        let session = try #require(plan.steps.first)
        let same = try #require(
            ServerTree(
                json: Self.tree(of: plan) { key, fields in
                    if key == "session" { fields["sessionDate"] = "2026-05-04T09:30:00.25Z" }
                }))
        #expect(same.match(session) == .present(id: 1))
        let other = try #require(
            ServerTree(
                json: Self.tree(of: plan) { key, fields in
                    if key == "session" { fields["sessionDate"] = "2026-05-04T09:30:01.25Z" }
                }))
        guard case .differs(_, "sessionDate", _, _) = other.match(session) else {
            Issue.record("expected sessionDate to differ, got \(other.match(session))")
            return
        }
    }
}
