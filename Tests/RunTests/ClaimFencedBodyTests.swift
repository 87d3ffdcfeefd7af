import NIOCore
import Synchronization
import Testing

@testable import DopeSync

/// The body of a request whose claim can run out: handed over only while the claim holds, asked
/// after each part is ready, so a worker woken past its lease does not complete a request whose
/// head went out before its pause.
@Suite struct ClaimFencedBodyTests {
    static let json = ByteBuffer(string: #"{"clientId":"6f1c","distance":300}"#)

    /// What `body` hands over, part by part, and the error it ends with, if any.
    static func drain<Body: AsyncSequence>(_ body: Body) async -> (sent: [ByteBuffer], error: (any Error)?)
    where Body.Element == ByteBuffer {
        var sent: [ByteBuffer] = []
        do {
            for try await part in body { sent.append(part) }
            return (sent, nil)
        } catch {
            return (sent, error)
        }
    }

    @Test("a claim that holds: the body goes out whole, byte for byte")
    func aHeldClaimSendsTheWholeBody() async {
        let (sent, error) = await Self.drain(ClaimFencedBody(base: OneBuffer(buffer: Self.json), claimHeld: { true }))
        #expect(sent == [Self.json] && error == nil)
    }

    @Test("a claim gone by the time the head has gone: nothing of the body goes out, and the request fails")
    func aClaimGoneAfterTheHeadSendsNoBody() async {
        let (sent, error) = await Self.drain(ClaimFencedBody(base: OneBuffer(buffer: Self.json), claimHeld: { false }))
        #expect(sent.isEmpty && error is ClaimLostMidBody)
    }

    @Test("asked after each part is ready: a claim lost after the first part stops the body before the second")
    func theClaimIsAskedBeforeEachPart() async {
        let asked = Mutex(0)
        let body = ClaimFencedBody(
            base: PartsBody(parts: [ByteBuffer(string: "first"), ByteBuffer(string: "second")]),
            claimHeld: {
                asked.withLock { count in
                    count += 1
                    return count == 1
                }
            })
        let (sent, error) = await Self.drain(body)
        #expect(sent == [ByteBuffer(string: "first")] && error is ClaimLostMidBody)
        #expect(asked.withLock { $0 } == 2, "asked once for each part, none after the refusal")
    }

    @Test(
        "asked once the part is ready: a lease that runs out while the rate cap waits or the archive reads sends nothing of it"
    )
    func theClaimIsAskedAfterThePartIsReady() async {
        let held = Atomic(true)
        // The part takes a while to be ready (a rate cap's wait, an archive's read), and the
        // claim runs out meanwhile.
        let body = ClaimFencedBody(
            base: PartsBody(parts: [Self.json], beforeEachPart: { held.store(false, ordering: .relaxed) }),
            claimHeld: { held.load(ordering: .relaxed) })
        let (sent, error) = await Self.drain(body)
        #expect(sent.isEmpty && error is ClaimLostMidBody)
    }

    @Test("a part that cannot be made once the claim is gone is the lost claim, not the bundle's fault")
    func aFailedPartAfterTheClaimIsGoneIsTheLostClaim() async {
        struct Rewritten: Error {}
        let held = Atomic(true)
        let failing = PartsBody(
            parts: [Self.json], beforeEachPart: { held.store(false, ordering: .relaxed) }, fails: Rewritten())
        let lost = await Self.drain(ClaimFencedBody(base: failing, claimHeld: { held.load(ordering: .relaxed) }))
        #expect(lost.error is ClaimLostMidBody)
        // While the claim holds, the part's own error is the answer.
        let stillHeld = PartsBody(parts: [Self.json], fails: Rewritten())
        #expect(await Self.drain(ClaimFencedBody(base: stillHeld, claimHeld: { true })).error is Rewritten)
    }
}

/// A body in a few parts, as the rate cap or an image hands them over.
private struct PartsBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let parts: [ByteBuffer]
    /// Runs while each part is being made ready.
    var beforeEachPart: @Sendable () -> Void = {}
    /// Thrown instead of the first part, as an image rewritten since validation is.
    var fails: (any Error & Sendable)? = nil

    struct AsyncIterator: AsyncIteratorProtocol {
        var remaining: [ByteBuffer]
        let beforeEachPart: @Sendable () -> Void
        let fails: (any Error & Sendable)?
        mutating func next() async throws -> ByteBuffer? {
            guard !remaining.isEmpty else { return nil }
            beforeEachPart()
            if let fails { throw fails }
            return remaining.removeFirst()
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(remaining: parts, beforeEachPart: beforeEachPart, fails: fails)
    }
}
