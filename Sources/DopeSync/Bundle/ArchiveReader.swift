import CArchive

#if canImport(Glibc)
import Glibc
#endif

/// What kind of thing an archive entry is. Only regular files and directories are acceptable in
/// a bundle; everything else is named so the error can say what was found.
enum ArchiveEntryKind: String, Sendable {
    case regularFile = "regular file"
    case directory
    case symbolicLink = "symbolic link"
    case hardLink = "hard link"
    case characterDevice = "character device"
    case blockDevice = "block device"
    case fifo = "FIFO"
    case socket
    case unknown = "unknown entry type"
}

/// One entry's header, as read from the archive (the path is not yet normalised).
struct ArchiveEntryHeader: Sendable {
    var rawPath: String
    var kind: ArchiveEntryKind
    /// The size the header declares, when it declares one (zip streams may not).
    var declaredSize: Int64?
    var isEncrypted: Bool
}

/// A forward-only reader over one archive file, wrapping libarchive.
///
/// Only the containers and filters of BUNDLE.md are enabled: tar (ustar, pax, GNU) and zip,
/// with gzip, bzip2, xz and zstd. Every other format libarchive knows — mtree above all, whose
/// reader pulls file contents from the local disk — is simply never registered, so libarchive
/// cannot recognise it and the archive is refused. The content decides, never the file name.
///
/// Use it through ``withArchiveReader(path:blockSize:_:)``; it is not Sendable and must not escape.
final class ArchiveReader {
    private let archive: OpaquePointer
    let path: String

    fileprivate init(path: String, blockSize: Int) throws(BundleError) {
        guard let archive = archive_read_new() else {
            throw BundleError(.io, culprit: path, message: "libarchive could not allocate a reader")
        }
        archive_read_support_filter_gzip(archive)
        archive_read_support_filter_bzip2(archive)
        archive_read_support_filter_xz(archive)
        archive_read_support_filter_zstd(archive)
        archive_read_support_format_tar(archive)  // ustar, pax, GNU tar
        archive_read_support_format_zip(archive)  // seekable when the file allows it, else streamable
        // Opened before `self` is complete, so a failure frees the handle here and deinit never runs.
        if archive_read_open_filename(archive, path, blockSize) != ARCHIVE_OK {
            let error = Self.classify(Self.errorString(archive) ?? "cannot open", culprit: path, during: nil)
            archive_read_free(archive)
            throw error
        }
        self.archive = archive
        self.path = path
    }

    deinit {
        archive_read_free(archive)
    }

    /// The next entry's header, or nil at the end of the archive.
    func nextHeader() throws(BundleError) -> ArchiveEntryHeader? {
        var entry: OpaquePointer?
        let status = archive_read_next_header(archive, &entry)
        switch status {
        case ARCHIVE_EOF:
            return nil
        case ARCHIVE_OK, ARCHIVE_WARN:
            guard let entry else { return nil }
            return Self.header(of: entry)
        default:
            throw unreadable(during: "reading the next entry")
        }
    }

    /// Reads up to `buffer.count` bytes of the current entry's data; 0 at its end.
    func readData(into buffer: UnsafeMutableRawBufferPointer) throws(BundleError) -> Int {
        let count = archive_read_data(archive, buffer.baseAddress, buffer.count)
        if count < 0 { throw unreadable(during: "reading entry data") }
        return count
    }

    /// Bytes read from the file so far: compressed bytes, for the ratio check.
    var compressedBytesRead: Int64 { archive_filter_bytes(archive, -1) }

    /// The container's name as libarchive reports it (for example "GNU tar format" or "ZIP 2.0 (deflation)").
    var formatName: String { archive_format_name(archive).map { String(cString: $0) } ?? "unknown" }

    /// The compression filters in use, outermost first, without the final "none".
    var filterNames: [String] {
        let count = archive_filter_count(archive)
        guard count > 0 else { return [] }
        return (0..<count).compactMap { index in
            archive_filter_name(archive, index).map { String(cString: $0) }
        }.filter { $0 != "none" }
    }

    private func unreadable(during activity: String) -> BundleError {
        Self.classify(Self.errorString(archive) ?? "unknown error", culprit: path, during: activity)
    }

    /// libarchive's message, turned into a code a person can act on: a cut-off stream says
    /// "truncated" or "premature end", an unknown format "unrecognized archive format".
    private static func classify(_ detail: String, culprit: String, during activity: String?) -> BundleError {
        let lowered = detail.lowercased()
        let code: BundleError.Code =
            if lowered.contains("truncated") || lowered.contains("premature") || lowered.contains("unexpected end") {
                .truncated
            } else if lowered.contains("unrecognized archive format") || lowered.contains("no such file")
                || lowered.contains("failed to open") || lowered.contains("empty")
            {
                .notAnArchive
            } else {
                .damaged
            }
        return BundleError(code, culprit: culprit, message: activity.map { "\($0): \(detail)" } ?? detail)
    }

    private static func errorString(_ archive: OpaquePointer) -> String? {
        archive_error_string(archive).map { String(cString: $0) }
    }

    private static func header(of entry: OpaquePointer) -> ArchiveEntryHeader {
        let path =
            archive_entry_pathname_utf8(entry).map { String(cString: $0) }
            ?? archive_entry_pathname(entry).map { String(decoding: UnsafeRawBufferPointer(start: $0, count: strlen($0)), as: UTF8.self) }
            ?? ""
        let kind: ArchiveEntryKind
        if archive_entry_hardlink(entry) != nil {
            kind = .hardLink
        } else {
            switch UInt32(archive_entry_filetype(entry)) & fileTypeMask {
            case 0o100000: kind = .regularFile
            case 0o040000: kind = .directory
            case 0o120000: kind = .symbolicLink
            case 0o020000: kind = .characterDevice
            case 0o060000: kind = .blockDevice
            case 0o010000: kind = .fifo
            case 0o140000: kind = .socket
            default: kind = .unknown
            }
        }
        let size: Int64? = archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : nil
        return ArchiveEntryHeader(
            rawPath: path,
            kind: kind,
            declaredSize: size,
            isEncrypted: archive_entry_is_encrypted(entry) != 0
        )
    }

    // AE_IFMT: libarchive's macros are casts, which Swift does not import.
    private static let fileTypeMask: UInt32 = 0o170000
}

/// Opens the archive at `path`, lends a reader to `body`, and closes it afterwards.
func withArchiveReader<T>(
    path: String,
    blockSize: Int = 64 * 1024,
    _ body: (ArchiveReader) throws(BundleError) -> T
) throws(BundleError) -> T {
    let reader = try ArchiveReader(path: path, blockSize: blockSize)
    return try body(reader)
}
