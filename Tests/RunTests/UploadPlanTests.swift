import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// ``UploadPlan``: the steps of a bundle, their record paths, and a plan refused where
/// validation's guarantee would be broken.
@Suite struct UploadPlanTests {
    @Test("each step names its record as a failure's field does: session, dope[i], chrono[i].readings[j], groups[i]…")
    func recordPaths() throws {
        let plan = try ServerTreeTests.plan(SampleSession(seed: 5))
        let paths = plan.steps.map(\.recordPath)
        #expect(paths.first == "session")
        #expect(paths.contains("dope[2]") && paths.contains("chrono[0].readings[4]"))
        #expect(paths.contains("groups[1]") && paths.contains("groups[1].measurement"))
        let images = plan.steps.filter { $0.kind == .image }.map(\.recordPath)
        #expect(!images.isEmpty && images.allSatisfy { $0.hasPrefix("groups[") && $0.contains("].images[") })
        #expect(Set(paths).count == paths.count, "one record, one path")
    }

    /// The keys and digests are what a run checkpoints and the server remembers: a version that
    /// wrote them differently would send a backlog's records again after an upgrade (new keys) or
    /// fail them as `changed_after_upload` (new digests). `sha256sum` says what they must be.
    @Test("every step's idempotency key and content digest are sha256sum's lowercase hex, as every version writes them")
    func keysAndDigestsAreSha256sumHex() async throws {
        let plan = try ServerTreeTests.plan(
            SampleSession(seed: 7, shape: .init().withImages(groups: 1, perGroup: 1, bytes: 300)))
        let session = try #require(plan.steps.first { $0.kind == .session })
        let image = try #require(plan.steps.first { $0.kind == .image })
        guard case .json(let body) = session.payload, case .image(let bundleImage, let role, _) = image.payload else {
            Issue.record("the session step carries JSON and the image step an image")
            return
        }
        func sha256sum(_ bytes: [UInt8]) async throws -> String {
            let output = try await runProcess("sha256sum", ["-"], stdin: Data(bytes))
            return String(output.stdout.prefix(64))
        }
        #expect(
            session.idempotencyKey == "dopesync-v1-" + (try await sha256sum(Array("\(plan.sessionID)\nsession".utf8))))
        #expect(session.contentDigest == (try await sha256sum(body)))
        let described = "image\n\(role)\n\(bundleImage.fileName)\n\(bundleImage.sha256)"
        #expect(image.contentDigest == (try await sha256sum(Array(described.utf8))))
        #expect(
            image.idempotencyKey == "dopesync-v1-"
                + (try await sha256sum(Array("\(plan.sessionID)\n\(image.key)".utf8))))
    }

    @Test("an image a record names but not handed over with the bundle: the plan is refused, naming the file")
    func missingImageRefusesThePlan() throws {
        let sample = SampleSession(seed: 6)
        guard case .success(let document) = SessionValidator.validate(sample.sessionBytes, maxBytes: 1 << 20) else {
            Issue.record("the sample is valid")
            return
        }
        let named = try #require(document.imageReferences.first?.fileName)
        #expect {
            _ = try UploadPlan(session: document, images: [:])
        } throws: { error in
            (error as? BundleError)?.code == .missingImage && (error as? BundleError)?.culprit == named
        }
    }
}
