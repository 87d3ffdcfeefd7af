import Synchronization

/// A bundle's images during its upload: the archive reader (``BundleEntryReader``) behind a lock,
/// every call into it on a thread that may block.
///
/// An image's chunks are a back-pressured sequence, as NIOFileSystem's `FileChunks` is: the HTTP
/// client asks for the next chunk when it has sent the last, and only then is it read, so memory
/// holds one chunk and the archive is never read ahead of the link. Positioning and each read go
/// to NIO's blocking pool, and the caller (on an event loop in `dopesync run`) only awaits them
/// (``BlockingCalls``).
///
/// Sendable for what it is: one reader, used by one bundle's upload, one call at a time, the lock
/// making that a fact rather than a promise. Each ``open(_:)`` starts a new reading, and a chunk is
/// asked for by reading: the body of an earlier try, still running after its request ended, gets
/// ``Superseded`` instead of a chunk of the next try's image.
public final class ArchiveImages: Sendable {
    private struct State {
        /// Nil once closed.
        var reader: BundleEntryReader?
        /// The image being read: from its ``open(_:)`` to its last chunk.
        var current: BundleEntryReader.ImageChunks?
        /// Which ``open(_:)`` `current` came from.
        var reading = 0
    }
    private let state: Mutex<State>

    public init(bundle: ValidatedBundle, chunkSize: Int = 256 * 1024) {
        state = Mutex(State(reader: BundleEntryReader(bundle: bundle, chunkSize: chunkSize)))
    }

    /// A chunk asked for by a reading that a later ``open(_:)`` or ``close()`` ended: the request
    /// it was for fails as a transport would, and the step's next try reads the image anew.
    struct Superseded: Error, CustomStringConvertible {
        var description: String { "an earlier try's image body asked for more after the image was opened again" }
    }

    /// Positions the archive at `image`, ready for its chunks, and returns the reading they belong
    /// to; a failure is the bundle's (it changed since validation) or the disk's.
    func open(_ image: BundleImage) async throws(BundleError) -> Int {
        try await BlockingPool.run { [self] () -> Result<Int, BundleError> in
            state.withLock { state in
                state.reading += 1
                state.current = nil
                return Result { () throws(BundleError) in
                    guard let reader = state.reader else {
                        throw BundleError(.io, culprit: image.entryPath, message: "the bundle's images were closed")
                    }
                    state.current = try reader.openImage(image)
                    return state.reading
                }
            }
        }.get()
    }

    /// The next chunk of `reading`'s image, or nil once it is complete and matches validation
    /// (size and SHA-256); throws ``Superseded`` for a reading that is over, a ``BundleError`` for
    /// bytes that changed or cannot be read.
    func nextChunk(of reading: Int) async throws -> [UInt8]? {
        try await BlockingPool.run { [self] () -> Result<[UInt8]?, any Error> in
            state.withLock { state in
                guard state.reading == reading else { return .failure(Superseded()) }
                return Result { () throws(BundleError) in
                    try state.current?.next()
                }.mapError { $0 }
            }
        }.get()
    }

    /// Closes the archive (libarchive frees it, its descriptor closes), on a thread that may block;
    /// any reading still going gets ``Superseded``. A bundle whose images all came from memory
    /// never opened it: then there is nothing to free and no trip to the blocking pool.
    func close() async {
        let opened = state.withLock { ($0.reader?.openCount ?? 0) > 0 }
        guard opened else { return closeNow() }
        await BlockingPool.run { [self] in closeNow() }
    }

    private func closeNow() {
        state.withLock { state in
            state.reading += 1
            state.current = nil
            state.reader = nil
        }
    }
}
