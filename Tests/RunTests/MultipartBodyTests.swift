import DopeSyncTestSupport
import Foundation
import NIOCore
import Synchronization
import Testing

@testable import DopeSync

/// ``MultipartBody``: an image's request body, streamed from the archive, usable once.
@Suite struct MultipartBodyTests {
    /// A packed sample whose first image step's image spans several chunks: its bytes, the
    /// validated bundle, the image and the step's framing.
    static func withImageStep(
        seed: UInt64, _ body: (SampleSession, ValidatedBundle, BundleImage, MultipartFraming) async throws -> Void
    ) async throws {
        try await withTemporarySpool { spool, scratch in
            var shape = SampleSession.Shape()
            shape.imageBytes = 600 * 1024  // several chunks
            let sample = SampleSession(seed: seed, shape: shape)
            let name = try pack(sample, into: spool, scratch: scratch)
            let bundle = try BundleInspector().inspect(path: spool.path(.incoming, name))
            let plan = try UploadPlan(session: bundle.session, images: bundle.images)
            let step = try #require(plan.steps.first { $0.kind == .image }, "the sample has an image")
            guard case .image(let image, let role, let groupID) = step.payload else {
                Issue.record("an image step carries an image")
                return
            }
            let framing = MultipartFraming(
                idempotencyKey: step.idempotencyKey, groupID: groupID, role: role, image: image)
            try await body(sample, bundle, image, framing)
        }
    }

    @Test(
        "the first pass sends head, image and tail; a second pass fails as the transport would, never reading the archive again"
    )
    func oneUseOnly() async throws {
        try await Self.withImageStep(seed: 31) { sample, bundle, image, framing in
            let images = ArchiveImages(bundle: bundle)
            let reading = try await images.open(image)
            let body = MultipartBody(framing: framing, image: image, images: images, reading: reading)

            var sent: [UInt8] = []
            for try await buffer in body { sent += buffer.readableBytesView }
            #expect(sent == framing.head + sample.images[image.fileName]! + framing.tail)

            let copy = body  // a copy is the same body: still used
            var again = copy.makeAsyncIterator()
            await #expect(throws: MultipartBody.UsedTwice.self) { _ = try await again.next() }
        }
    }

    @Test(
        "an earlier try's body, still asking after the image was opened again, gets no chunk of the new reading, which stays whole"
    )
    func aStaleBodyIsSuperseded() async throws {
        try await Self.withImageStep(seed: 33) { sample, bundle, image, framing in
            let images = ArchiveImages(bundle: bundle)
            let first = MultipartBody(
                framing: framing, image: image, images: images, reading: try await images.open(image))
            var stale = first.makeAsyncIterator()
            _ = try await stale.next()  // the head
            _ = try await stale.next()  // the image's first chunk
            // The step is tried again: the image is opened anew while the first body still runs.
            let second = MultipartBody(
                framing: framing, image: image, images: images, reading: try await images.open(image))
            await #expect(throws: ArchiveImages.Superseded.self) { _ = try await stale.next() }

            var sent: [UInt8] = []
            for try await buffer in second { sent += buffer.readableBytesView }
            #expect(sent == framing.head + sample.images[image.fileName]! + framing.tail)

            await images.close()
            var closed = MultipartBody(
                framing: framing, image: image, images: images, reading: 2
            ).makeAsyncIterator()
            _ = try await closed.next()
            await #expect(throws: ArchiveImages.Superseded.self) { _ = try await closed.next() }
        }
    }

    @Test(
        "behind the claim's fence, a claim that runs out while the image is being sent cuts the body short before its next chunk, never completing it"
    )
    func aClaimLostMidBodyCutsItShort() async throws {
        try await Self.withImageStep(seed: 32) { sample, bundle, image, framing in
            // Held for the head and the first chunk of the image; then the lease is gone.
            let asked = Mutex(0)
            let images = ArchiveImages(bundle: bundle)
            let reading = try await images.open(image)
            let body = ClaimFencedBody(
                base: MultipartBody(framing: framing, image: image, images: images, reading: reading),
                claimHeld: {
                    asked.withLock {
                        $0 += 1
                        return $0 <= 2
                    }
                })
            var sent: [UInt8] = []
            await #expect(throws: ClaimLostMidBody.self) {
                for try await buffer in body { sent += buffer.readableBytesView }
            }
            let whole = framing.head.count + sample.images[image.fileName]!.count + framing.tail.count
            #expect(sent.count > framing.head.count && sent.count < whole - framing.tail.count)
            #expect(
                !sent.suffix(framing.tail.count).elementsEqual(framing.tail), "the closing delimiter never went out")
        }
    }
}
