import NIOCore
import Synchronization

/// `--max-rate`: one token bucket for the whole run, taken from by every request body's chunks,
/// so the bundles uploaded at once share the cap rather than each getting it.
///
/// A chunk takes its bytes at once, running the bucket into debt if need be, and its sender
/// waits until the debt is paid back at the cap's rate (a reservation, as Go's `rate.Limiter`
/// does it): waiters are served in the order they came, and no chunk is split. The bucket holds
/// at most ``burst`` bytes, so an idle moment lets through no more than a tenth of a second's
/// worth at once.
public final class UploadRateLimit: Sendable {
    public let bytesPerSecond: Int64
    /// The most bytes let through without waiting after an idle moment.
    public let burst: Int64

    private struct Bucket {
        /// Bytes that may go now; negative while senders wait for the ones they took.
        var available: Double
        var refilledAt: ContinuousClock.Instant
    }
    private let bucket: Mutex<Bucket>

    public init(bytesPerSecond: Int64) {
        precondition(bytesPerSecond > 0)
        self.bytesPerSecond = bytesPerSecond
        self.burst = max(bytesPerSecond / 10, Self.chunkSize)
        self.bucket = Mutex(Bucket(available: Double(burst), refilledAt: .now))
    }

    /// The size request bodies are cut into under a cap: small enough that one chunk is a small
    /// part of a second's worth even at a low cap, big enough to cost nothing at a high one.
    public static let chunkSize: Int64 = 16 * 1024

    /// How long a sender of `bytes` must wait before sending them, now that it has taken them.
    func take(_ bytes: Int, now: ContinuousClock.Instant = .now) -> Duration {
        bucket.withLock { bucket in
            let refill = (now - bucket.refilledAt) / .seconds(1) * Double(bytesPerSecond)
            bucket.available = min(bucket.available + refill, Double(burst))
            bucket.refilledAt = now
            bucket.available -= Double(bytes)
            guard bucket.available < 0 else { return .zero }
            return .nanoseconds(Int64((-bucket.available / Double(bytesPerSecond) * 1e9).rounded(.up)))
        }
    }

    /// Takes `bytes` from the bucket and waits until they may go. Throws only if the task is
    /// cancelled while waiting (the request is being abandoned anyway).
    func send(_ bytes: Int) async throws {
        let wait = take(bytes)
        if wait > .zero { try await sleepOnLoop(for: wait) }
    }
}

/// A request body whose bytes go through the run's rate cap, in chunks of at most
/// ``UploadRateLimit/chunkSize``: each chunk is handed to the HTTP client only once the cap
/// lets it go, so the connection never holds more than a chunk ahead of the cap.
struct RateLimitedBody<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let base: Base
    let limit: UploadRateLimit

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let limit: UploadRateLimit
        var pending = ByteBuffer()

        mutating func next() async throws -> ByteBuffer? {
            while pending.readableBytes == 0 {
                guard let buffer = try await base.next() else { return nil }
                pending = buffer
            }
            let length = Swift.min(pending.readableBytes, Int(UploadRateLimit.chunkSize))
            guard let chunk = pending.readSlice(length: length) else { return nil }  // length <= readableBytes
            try await limit.send(length)
            return chunk
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: base.makeAsyncIterator(), limit: limit) }
}

/// One buffer as an async sequence: a body already in memory, for ``RateLimitedBody``.
struct OneBuffer: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let buffer: ByteBuffer

    struct AsyncIterator: AsyncIteratorProtocol {
        var buffer: ByteBuffer?
        mutating func next() async -> ByteBuffer? {
            defer { buffer = nil }
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(buffer: buffer) }
}
