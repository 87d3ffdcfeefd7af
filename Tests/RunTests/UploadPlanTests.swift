import DopeSyncTestSupport
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
