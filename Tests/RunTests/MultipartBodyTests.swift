import DopeSyncTestSupport
import Foundation
import NIOCore
import Synchronization
import Testing

@testable import DopeSync

/// ``MultipartBody``: an image's request body, streamed from the archive, usable once.
@Suite struct MultipartBodyTests {
    @Test(
        "the first pass sends head, image and tail; a second pass fails as the transport would, never reading the archive again"
    )
    func oneUseOnly() async throws {
        try await withTemporarySpool { spool, scratch in
            var shape = SampleSession.Shape()
            shape.imageBytes = 600 * 1024  // several chunks
            let sample = SampleSession(seed: 31, shape: shape)
            let name = try pack(sample, into: spool, scratch: scratch)
            let bundle = try BundleInspector().inspect(path: spool.path(.incoming, name))
            let plan = try UploadPlan(session: bundle.session, images: bundle.images)
            guard let step = plan.steps.first(where: { $0.kind == .image }),
                case .image(let image, let role, let groupID) = step.payload
            else {
                Issue.record("the sample has an image")
                return
            }
            let framing = MultipartFraming(
                idempotencyKey: step.idempotencyKey, groupID: groupID, role: role, image: image)
            let images = ArchiveImages(bundle: bundle)
            try await images.open(image)
            let body = MultipartBody(framing: framing, image: image, images: images)

            var sent: [UInt8] = []
            for try await buffer in body { sent += buffer.readableBytesView }
            #expect(sent == framing.head + sample.images[image.fileName]! + framing.tail)

            let copy = body  // a copy is the same body: still used
            var again = copy.makeAsyncIterator()
            await #expect(throws: MultipartBody.UsedTwice.self) { _ = try await again.next() }
        }
    }

    @Test(
        "a claim that runs out while the image is being sent cuts the body short before its next chunk, never completing it"
    )
    func aClaimLostMidBodyCutsItShort() async throws {
        try await withTemporarySpool { spool, scratch in
            var shape = SampleSession.Shape()
            shape.imageBytes = 600 * 1024  // several chunks
            let sample = SampleSession(seed: 32, shape: shape)
            let name = try pack(sample, into: spool, scratch: scratch)
            let bundle = try BundleInspector().inspect(path: spool.path(.incoming, name))
            let plan = try UploadPlan(session: bundle.session, images: bundle.images)
            guard let step = plan.steps.first(where: { $0.kind == .image }),
                case .image(let image, let role, let groupID) = step.payload
            else {
                Issue.record("the sample has an image")
                return
            }
            let framing = MultipartFraming(
                idempotencyKey: step.idempotencyKey, groupID: groupID, role: role, image: image)
            // Held for the head and the first chunk of the image; then the lease is gone.
            let asked = Mutex(0)
            let images = ArchiveImages(bundle: bundle)
            try await images.open(image)
            let body = MultipartBody(
                framing: framing, image: image, images: images,
                claimHeld: {
                    asked.withLock {
                        $0 += 1
                        return $0 <= 2
                    }
                })
            var sent: [UInt8] = []
            await #expect(throws: MultipartBody.ClaimLost.self) {
                for try await buffer in body { sent += buffer.readableBytesView }
            }
            let whole = framing.head.count + sample.images[image.fileName]!.count + framing.tail.count
            #expect(sent.count > framing.head.count && sent.count < whole - framing.tail.count)
            #expect(
                !sent.suffix(framing.tail.count).elementsEqual(framing.tail), "the closing delimiter never went out")
        }
    }
}
