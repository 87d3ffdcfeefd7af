import NIOCore

/// A request body that goes out only while the bundle's claim holds, for a claim that can run
/// out (a lease, ``ClaimStorage/claimsRunOut``).
///
/// AsyncHTTPClient writes a request's head and its body separately, so a worker paused between
/// the two (SIGSTOP, a frozen VM) used to complete the body when it woke, after its lease had run
/// out and another worker had sent the same step: against a server that ignores
/// `Idempotency-Key`, a second record. The claim is asked as each part is handed over, after the
/// head has gone; once it says no, the body stops and the request is cut short, which no server
/// takes for a whole one. What remains is the time between that question and the bytes leaving:
/// the call from here to the socket's write, and for a large body what NIO and the kernel still
/// buffer (ARCHITECTURE.md, "The worker's clock").
struct ClaimFencedBody<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let base: Base
    let claimHeld: @Sendable () -> Bool

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let claimHeld: @Sendable () -> Bool

        mutating func next() async throws -> ByteBuffer? {
            // After the part is ready (a rate cap may have waited for it), just before it goes.
            let part: ByteBuffer?
            do {
                part = try await base.next()
            } catch {
                // A part that could not be made (an image rewritten, an unreadable archive) is
                // the bundle's fault only while the bundle is still this worker's.
                guard claimHeld() else { throw ClaimLostMidBody() }
                throw error
            }
            guard let part else { return nil }
            guard claimHeld() else { throw ClaimLostMidBody() }
            return part
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator(), claimHeld: claimHeld)
    }
}

/// The claim ran out while a request's body was being sent: the request is cut short, never
/// completed.
struct ClaimLostMidBody: Error, CustomStringConvertible {
    var description: String {
        "the bundle's claim ran out while a request's body was being sent; the request was cut short"
    }
}
