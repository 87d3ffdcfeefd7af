import Synchronization
import ThreadRules

/// A bundle's images during its upload: the archive reader (``BundleEntryReader``) behind a lock,
/// every call into it on a thread that may block.
///
/// An image's chunks are a back-pressured sequence, as NIOFileSystem's `FileChunks` is: the HTTP
/// client asks for the next chunk when it has sent the last, and only then is it read, so memory
/// holds one chunk and the archive is never read ahead of the link. Called on an event loop (the
/// global executor in `dopesync run`), positioning and each read go to NIO's blocking pool and
/// the loop only awaits them (``BlockingCalls``); elsewhere they run in place.
///
/// Sendable for what it is: one reader, used by one bundle's upload, one call at a time, the lock
/// making that a fact rather than a promise.
public final class ArchiveImages: Sendable {
    private struct State {
        var reader: BundleEntryReader
        /// The image being read: from its ``open(_:)`` to its last chunk.
        var current: BundleEntryReader.ImageChunks?
    }
    private let state: Mutex<State>

    public init(bundle: ValidatedBundle, chunkSize: Int = 256 * 1024) {
        state = Mutex(State(reader: BundleEntryReader(bundle: bundle, chunkSize: chunkSize)))
    }

    /// How many times the archive was opened so far (images asked for out of archive order).
    var openCount: Int { state.withLock { $0.reader.openCount } }

    /// Positions the archive at `image`, ready for its chunks; a failure is the bundle's (it
    /// changed since validation) or the disk's.
    func open(_ image: BundleImage) async throws(BundleError) {
        try await Self.whereMayBlock { [self] () -> Result<Void, BundleError> in
            self.state.withLock { state in
                Result { () throws(BundleError) in state.current = try state.reader.openImage(image) }
            }
        }.get()
    }

    /// The opened image's next chunk, or nil once it is complete and matches validation (size and
    /// SHA-256); nil also when no image is open.
    func nextChunk() async throws(BundleError) -> [UInt8]? {
        try await Self.whereMayBlock { [self] () -> Result<[UInt8]?, BundleError> in
            self.state.withLock { state in
                Result { () throws(BundleError) in
                    let chunk = try state.current?.next()
                    if chunk == nil { state.current = nil }
                    return chunk
                }
            }
        }.get()
    }

    /// `body` where it is when this thread may block, else on NIO's blocking pool.
    private static func whereMayBlock<Value: Sendable>(_ body: @escaping @Sendable () -> Value) async -> Value {
        BlockingCalls.allowedHere ? body() : await BlockingPool.run(body)
    }
}
