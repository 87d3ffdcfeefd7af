import Crypto
import DopeSyncSupport

/// A regular file found in an archive, with what one streaming pass learnt about it.
struct ScannedFile: Sendable, Hashable {
    /// The normalised path from the archive's top (before the bundle root is stripped).
    var path: String
    /// The entry's position in the archive, counting every entry (``BundleEntryReader`` finds it
    /// again by the same count, and reopens the archive to go back).
    var ordinal: Int
    var size: Int64
    var sha256: String
    /// The first bytes, enough to recognise an image type.
    var prefix: [UInt8]
    /// Whether the bytes hold ``MultipartFraming/boundaryMarker`` anywhere: then no boundary made
    /// from the step's key alone can be proven absent from them (see ``MultipartFraming``).
    var holdsBoundaryMarker = false
}

/// Everything one pass over an archive found, before the bundle's own rules are applied.
///
/// The pass reads every byte of every entry (skipping would let a bomb hide in an ignored file),
/// hashes each file as it streams, and keeps in memory only the headers, the hashes, the first
/// bytes of each file, and the candidates for `session.json` and `manifest.json`, which are
/// bounded by ``BundleLimits/maxSessionBytes``.
struct ArchiveScan: Sendable {
    var container: String = ""
    var filters: [String] = []
    var files: [ScannedFile] = []
    var directories: Set<String> = []
    /// `session.json` and `manifest.json` found at the top or one folder down, by full path.
    var buffered: [String: [UInt8]] = [:]
    /// The bytes of small files in an `images/` folder, by full path, kept so that sending them
    /// needs no second pass over the archive (see ``retainedFileLimit``).
    var retained: [String: [UInt8]] = [:]
    var entryCount = 0
    var unpackedBytes: Int64 = 0
    var compressedBytes: Int64 = 0
    var retainedBytes: Int64 = 0
    /// Problems that do not make the rest of the archive untrustworthy; reading went on.
    var errors: [BundleError] = []

    static let bufferedNames: Set<String> = ["session.json", "manifest.json"]
    /// An image no larger than one read chunk is kept from this pass and sent from memory: a
    /// second pass would decompress the archive again up to it and stream it in pieces, which
    /// for a small image costs more than the image. Larger images are streamed as before.
    static let retainedFileLimit: Int64 = 256 * 1024
    /// What a bundle's retained images may hold in all, so memory stays bounded whatever the bundle.
    static let retainedTotalLimit: Int64 = 1 << 20

    /// Reads the whole archive at `path` once. Throws only for errors that stop the reading
    /// (unreadable, truncated, damaged, limits passed); other problems land in ``errors``.
    static func scan(
        path: String, expected: FileIdentity? = nil, limits: BundleLimits, budget: ReadBudget = .unbounded
    ) throws(BundleError) -> ArchiveScan {
        try withArchiveReader(path: path, expected: expected, budget: budget) { reader throws(BundleError) in
            var scan = ArchiveScan()
            var names = SeenNames()
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)
            defer { buffer.deallocate() }

            while let header = try reader.nextHeader() {
                if scan.entryCount == 0 {
                    // libarchive knows the format only once the first header is read.
                    scan.container = reader.formatName
                    scan.filters = reader.filterNames
                }
                try scan.readEntry(header, from: reader, buffer: buffer, limits: limits, names: &names)
            }
            if scan.entryCount == 0 {
                throw BundleError(.notAnArchive, culprit: path, message: "the archive is empty")
            }
            scan.compressedBytes = reader.compressedBytesRead
            return scan
        }
    }

    /// Counts the entry `header` opens, decides whether it is a file the bundle may hold, reads
    /// all its data, and records what was learnt of an accepted file.
    private mutating func readEntry(
        _ header: ArchiveEntryHeader, from reader: ArchiveReader, buffer: UnsafeMutableRawBufferPointer,
        limits: BundleLimits, names: inout SeenNames
    ) throws(BundleError) {
        entryCount += 1
        if entryCount > limits.maxEntries {
            throw BundleError(
                .tooManyEntries, culprit: header.rawPath,
                message: "more than \(limits.maxEntries) entries (the limit)"
            )
        }
        let (path, accepted) = admit(header, seenPaths: &names.paths)
        var content = accepted ? contentToCollect(for: path, declaredSize: header.declaredSize, names: &names) : nil
        // Every entry's data goes through the volume checks, even one already refused:
        // letting libarchive skip it would unpack it unseen, and a bomb could hide there.
        try readData(from: reader, buffer: buffer, limits: limits, culprit: path, into: &content)
        if let content { record(content, path: path, limits: limits) }
    }

    /// What to collect of an accepted file's bytes besides their hash. `session.json` and
    /// `manifest.json` are buffered at the top or in the first top-level folder that has one (a
    /// second folder with one cannot be the single-top-folder root); a small file in an `images/`
    /// folder is retained while the retained total allows.
    private func contentToCollect(for path: String, declaredSize: Int64?, names: inout SeenNames) -> EntryContent {
        let components = path.split(separator: "/", omittingEmptySubsequences: false)
        if let name = components.last.map(String.init), Self.bufferedNames.contains(name), components.count <= 2 {
            let folder = components.count == 2 ? String(components[0]) : nil
            if folder == nil || names.bufferedTopFolder == nil || names.bufferedTopFolder == folder {
                if let folder { names.bufferedTopFolder = folder }
                return EntryContent(kept: [])
            }
        }
        if components.count >= 2, components[components.count - 2] == "images", let declared = declaredSize,
            declared <= Self.retainedFileLimit, retainedBytes + declared <= Self.retainedTotalLimit
        {
            var retained: [UInt8] = []
            retained.reserveCapacity(Int(declared))
            return EntryContent(retained: retained)
        }
        return EntryContent()
    }

    /// Reads the current entry's data to its end, with the volume checks after every block;
    /// `content`, for an accepted file, takes every block.
    private mutating func readData(
        from reader: ArchiveReader, buffer: UnsafeMutableRawBufferPointer, limits: BundleLimits,
        culprit path: String, into content: inout EntryContent?
    ) throws(BundleError) {
        while true {
            let count = try reader.readData(into: buffer)
            if count == 0 { return }
            unpackedBytes += Int64(count)
            try checkVolume(limits: limits, compressed: reader.compressedBytesRead, culprit: path)
            content?.append(UnsafeRawBufferPointer(rebasing: buffer[..<count]), limits: limits)
        }
    }

    /// Records an accepted file whose data has all been read.
    private mutating func record(_ content: EntryContent, path: String, limits: BundleLimits) {
        if content.keptPastLimit {
            errors.append(
                BundleError(
                    .sessionTooLarge, culprit: path,
                    message: "larger than \(ByteCount(limits.maxSessionBytes)) (the limit)"
                ))
        }
        files.append(
            ScannedFile(
                path: path, ordinal: entryCount - 1, size: content.size,
                sha256: content.hasher.finalize().hexString, prefix: content.prefix,
                holdsBoundaryMarker: content.marker.found
            ))
        if let kept = content.kept { buffered[path] = kept }
        if let retainedContent = content.retained, retainedBytes + content.size <= Self.retainedTotalLimit {
            retained[path] = retainedContent
            retainedBytes += content.size
        }
    }

    /// Normalises an entry's path and decides whether it is a file the bundle may hold;
    /// records why not, otherwise. Directories are remembered but not "accepted" as files.
    private mutating func admit(_ header: ArchiveEntryHeader, seenPaths: inout Set<String>) -> (
        path: String, accepted: Bool
    ) {
        if let nameError = header.nameError {
            errors.append(nameError)
            return (header.rawPath, false)
        }
        let path: String
        switch EntryPath.normalise(header.rawPath) {
        case .success(let normalised): path = normalised
        case .failure(let error):
            errors.append(error)
            return (header.rawPath, false)
        }
        if path.isEmpty { return (path, false) }  // the archive's own "./"
        switch header.kind {
        case .directory:
            directories.insert(path)
            return (path, false)
        case .regularFile:
            break
        case .symbolicLink, .hardLink:
            errors.append(
                BundleError(.linkEntry, culprit: path, message: "a \(header.kind.rawValue) is not allowed in a bundle"))
            return (path, false)
        case .characterDevice, .blockDevice, .fifo, .socket, .unknown:
            errors.append(
                BundleError(
                    .specialEntry, culprit: path, message: "a \(header.kind.rawValue) is not allowed in a bundle"))
            return (path, false)
        }
        if header.isEncrypted {
            errors.append(BundleError(.encryptedEntry, culprit: path, message: "encrypted entries cannot be read"))
            return (path, false)
        }
        if !seenPaths.insert(path).inserted {
            errors.append(
                BundleError(.duplicatePath, culprit: path, message: "the archive holds this path more than once"))
            return (path, false)
        }
        return (path, true)
    }

    /// The bomb check, run after every block: total bytes, then the unpacked-to-compressed ratio.
    private mutating func checkVolume(limits: BundleLimits, compressed: Int64, culprit: String) throws(BundleError) {
        if unpackedBytes > limits.maxTotalBytes {
            throw BundleError(
                .tooManyBytes, culprit: culprit,
                message: "more than \(ByteCount(limits.maxTotalBytes)) unpacked in all (the limit)"
            )
        }
        if unpackedBytes > limits.ratioCheckAfterBytes {
            let ratio = Double(unpackedBytes) / Double(max(compressed, 1))
            if ratio > limits.maxCompressionRatio {
                throw BundleError(
                    .compressionRatio, culprit: culprit,
                    message: "unpacks to more than \(Int(limits.maxCompressionRatio)) times its compressed size "
                        + "(\(ByteCount(unpackedBytes)) from \(ByteCount(compressed))): refused as a decompression bomb"
                )
            }
        }
    }
}

/// What one pass over an archive remembers of the names it has read.
private struct SeenNames {
    /// The accepted files' paths, so that a second entry with one is refused.
    var paths: Set<String> = []
    /// The top-level folder whose `session.json` and `manifest.json` are buffered, once one is.
    var bufferedTopFolder: String?
}

/// Whatever begins a multipart delimiter of a boundary made from a key alone: an image that
/// holds it gets a boundary that also hashes its own SHA-256 (the upload's `MultipartFraming`).
package let multipartBoundaryMarker = "--dopesync-"

/// What one pass learns of an accepted file's bytes as they stream by.
private struct EntryContent {
    var size: Int64 = 0
    var hasher = SHA256()
    var marker = StreamingSearch(multipartBoundaryMarker)
    /// The first bytes, for ``ScannedFile/prefix``.
    var prefix: [UInt8] = []
    /// All of a buffered file (`session.json`, `manifest.json`) while within
    /// ``BundleLimits/maxSessionBytes``; nil once past it, or when it is not buffered.
    var kept: [UInt8]?
    /// Whether a buffered file went past its limit (it is then refused as too large).
    var keptPastLimit = false
    /// All of a retained image while within ``ArchiveScan/retainedFileLimit``; else nil.
    var retained: [UInt8]?

    init(kept: [UInt8]? = nil, retained: [UInt8]? = nil) {
        self.kept = kept
        self.retained = retained
    }

    mutating func append(_ chunk: UnsafeRawBufferPointer, limits: BundleLimits) {
        size += Int64(chunk.count)
        hasher.update(bufferPointer: chunk)
        marker.update(chunk)
        if prefix.count < ImageType.sniffLength {
            prefix.append(contentsOf: chunk.prefix(ImageType.sniffLength - prefix.count))
        }
        if size > ArchiveScan.retainedFileLimit { retained = nil } else { retained?.append(contentsOf: chunk) }
        if kept != nil, size > limits.maxSessionBytes {
            kept = nil
            keptPastLimit = true
        } else {
            kept?.append(contentsOf: chunk)
        }
    }
}

/// Paths inside an archive, as docs/bundle-format.md has them: a leading `./` dropped, no absolute paths,
/// no `..` component.
enum EntryPath {
    static func normalise(_ raw: String) -> Result<String, BundleError> {
        if raw.hasPrefix("/") {
            return .failure(BundleError(.absolutePath, culprit: raw, message: "an absolute path is not allowed"))
        }
        if raw.contains("\\") || raw.contains("\0") {
            return .failure(
                BundleError(.badEntryPath, culprit: raw, message: "a path may not contain a backslash or NUL"))
        }
        var components = raw.split(separator: "/", omittingEmptySubsequences: true)
        if components.contains("..") {
            return .failure(
                BundleError(.parentTraversal, culprit: raw, message: "a path with a `..` component is not allowed"))
        }
        // `./a` and `a/./b` name the same file as `a` and `a/b`.
        components.removeAll { $0 == "." }
        return .success(components.joined(separator: "/"))
    }
}
