import Crypto
import DopeSyncSupport

/// Streams the bytes of a validated bundle's images straight out of the archive, one bounded
/// chunk at a time, without extracting anything to disk.
///
/// It keeps the archive open and moves forward through it: images asked for in archive order
/// (what `dopesync pack` writes) cost one pass in all. Asking for an entry that lies behind the
/// cursor reopens the archive, because compressed tar streams cannot seek backwards.
///
/// Not Sendable: one bundle's upload uses one reader, from one task at a time.
public final class BundleEntryReader {
    private let bundle: ValidatedBundle
    private let chunkSize: Int
    private var reader: ArchiveReader?
    /// The position of the next entry the cursor will reach, counting every entry as validation
    /// did: counting only some (say, regular files) would disagree with it wherever validation
    /// passed over an entry the count took in (a file with an empty name, `make fuzz` found).
    private var nextOrdinal = 0
    /// How many times the archive was opened: the cost of out-of-order images.
    public private(set) var openCount = 0

    public init(bundle: ValidatedBundle, chunkSize: Int = 256 * 1024) {
        self.bundle = bundle
        self.chunkSize = chunkSize
    }

    /// Hands the image's bytes to `body` in chunks of at most `chunkSize`, then checks that they
    /// are the bytes that were validated (size and SHA-256): the bundle must not have changed.
    public func withImageChunks(
        _ image: BundleImage,
        _ body: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        var stream = try openImage(image)
        while let chunk = try stream.next() {
            try chunk.withUnsafeBytes { try body($0) }
        }
    }

    /// A pull-based stream of the image's bytes (for an HTTP body that asks for the next chunk
    /// when it is ready for it). The last call checks size and SHA-256 against validation.
    public func openImage(_ image: BundleImage) throws(BundleError) -> ImageChunks {
        ImageChunks(reader: try position(at: image), image: image, chunkSize: chunkSize)
    }

    /// The bytes of one image, chunk by chunk; see ``BundleEntryReader/openImage(_:)``.
    public struct ImageChunks {
        fileprivate let reader: ArchiveReader
        let image: BundleImage
        let chunkSize: Int
        private var hasher = SHA256()
        private var size: Int64 = 0
        private var finished = false

        fileprivate init(reader: ArchiveReader, image: BundleImage, chunkSize: Int) {
            self.reader = reader
            self.image = image
            self.chunkSize = chunkSize
        }

        /// The next chunk, or nil once the image is complete and verified.
        public mutating func next() throws(BundleError) -> [UInt8]? {
            if finished { return nil }
            // Read straight into uninitialised storage: no zero-fill of a chunk per read.
            var readError: BundleError?
            let chunk = [UInt8](unsafeUninitializedCapacity: chunkSize) { buffer, initialized in
                do throws(BundleError) {
                    initialized = try reader.readData(into: UnsafeMutableRawBufferPointer(buffer))
                } catch {
                    readError = error
                    initialized = 0
                }
            }
            if let readError { throw readError }
            let count = chunk.count
            if count > 0 {
                hasher.update(data: chunk)
                size += Int64(count)
                return chunk
            }
            finished = true
            guard size == image.size, hasher.finalize().hexString == image.sha256 else {
                throw BundleError(
                    .changedAfterValidation, culprit: image.entryPath,
                    message: "changed since it was validated (now \(size) bytes, was \(image.size))"
                )
            }
            return nil
        }
    }

    /// Leaves an open reader positioned at the start of `image`'s data.
    private func position(at image: BundleImage) throws(BundleError) -> ArchiveReader {
        if reader == nil || image.ordinal < nextOrdinal {
            reader = nil
            reader = try ArchiveReader.opening(path: bundle.path, expected: bundle.identity)
            openCount += 1
            nextOrdinal = 0
        }
        let reader = self.reader!
        while let header = try reader.nextHeader() {
            let ordinal = nextOrdinal
            nextOrdinal += 1
            if ordinal == image.ordinal {
                let path = EntryPath.normalise(header.rawPath).successValue
                guard path == image.entryPath else {
                    throw BundleError(
                        .changedAfterValidation, culprit: image.entryPath,
                        message: "the archive changed since it was validated (found \(header.rawPath))")
                }
                return reader
            }
            // Read through, as validation did, never skipped: libarchive may fail to skip data it
            // can read (a damaged zip read front to back, `make fuzz` found), and then a bundle
            // validation accepted would fail mid-upload.
            try readThrough(reader)
        }
        throw BundleError(.changedAfterValidation, culprit: image.entryPath, message: "no longer in the archive")
    }

    /// Reads the rest of the current entry's data into scratch space.
    private func readThrough(_ reader: ArchiveReader) throws(BundleError) {
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 1)
        defer { scratch.deallocate() }
        while try reader.readData(into: scratch) > 0 {}
    }
}
