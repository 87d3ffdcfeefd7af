import CArchive
import ThreadRules

#if canImport(Glibc)
    import Glibc
#endif

/// What went wrong in a reading, in terms a person can act on.
extension ArchiveReader {
    /// Why reading failed: the budget's reason when a callback refused to go on, the file's read
    /// error when it could not be read, else libarchive's error turned into a code a person can act
    /// on (see ``code(libarchiveErrno:detail:opening:)``).
    static func classify(
        _ archive: OpaquePointer, input: ArchiveInput, culprit: String, during activity: String?
    ) -> BundleError {
        if let interruption = input.interruption { return interruption }
        if input.readErrno != 0 {
            return BundleError(
                .io, culprit: culprit, message: "cannot read: \(String(cString: strerror(input.readErrno)))",
                systemErrno: input.readErrno)
        }
        let detail = errorString(archive) ?? "unknown error"
        let code = Self.code(libarchiveErrno: archive_errno(archive), detail: detail, opening: activity == nil)
        return BundleError(code, culprit: culprit, message: activity.map { "\($0): \(detail)" } ?? detail)
    }

    /// libarchive's errno, where it tells the cases apart (libarchive 3.6, tar, zip and the four
    /// filters, as read from its sources and seen on real archives cut short):
    /// - ARCHIVE_ERRNO_FILE_FORMAT while opening: format detection found neither tar nor zip
    ///   ("Unrecognized archive format"), for an empty file too. A stream under a filter that is
    ///   cut or damaged before its first header also ends here; ``explainNesting`` looks inside.
    /// - EIO: "Premature end-of-file", the one EIO libarchive sets while reading.
    /// - EINVAL: tar's "Damaged tar archive" (a header's checksum) and "Special header too large".
    ///
    /// Otherwise the errno does not say, and the message decides: past opening libarchive sets
    /// ARCHIVE_ERRNO_FILE_FORMAT and ARCHIVE_ERRNO_MISC (-1) both for input cut short ("Truncated
    /// tar archive" comes with either, by where the cut falls; "truncated gzip input" with MISC)
    /// and for damaged input, and a gzip stream missing only part of its trailer fails with no
    /// errno (0) and no message at all.
    package static func code(libarchiveErrno: Int32, detail: String, opening: Bool) -> BundleError.Code {
        switch libarchiveErrno {
        case archiveFileFormatErrno where opening: return .notAnArchive
        case EIO: return .truncated
        case EINVAL: return .damaged
        default: break
        }
        let lowered = detail.lowercased()
        return if lowered.contains("truncated") || lowered.contains("premature") || lowered.contains("unexpected end") {
            .truncated
        } else if lowered.contains("unrecognized archive format") || lowered.contains("empty") {
            .notAnArchive
        } else {
            .damaged
        }
    }

    /// ARCHIVE_ERRNO_FILE_FORMAT, which archive.h names but does not define: EFTYPE where the
    /// system has it (BSD, macOS), else EILSEQ, as on Linux.
    private static let archiveFileFormatErrno = EILSEQ

    /// "Not an archive" inside a compression filter, explained: a stream that starts with
    /// compressed data again is a nested stream, and a stream that breaks off is truncated or
    /// damaged (libarchive's format detection reports both as an unknown format once filter
    /// detection is off). Either says more to a person than "not an archive".
    static func explainNesting(
        _ error: BundleError, path: String, expected: FileIdentity?, filter outer: CompressionMagic?
    ) -> BundleError {
        guard error.code == .notAnArchive, let outer, let code = outer.allowedFilter else { return error }
        return probeInside(path: path, expected: expected, filter: code, name: outer.rawValue) ?? error
    }

    /// Unpacks the start of the `filter` stream (at most 64 KiB, with libarchive's "raw" format: a
    /// single entry of the stream's bytes), never more, so a stream that unpacks into itself costs
    /// one block here. Returns what is wrong with it, if that can be said.
    private static func probeInside(path: String, expected: FileIdentity?, filter: Int32, name: String) -> BundleError?
    {
        BlockingCalls.check("libarchive: probing \(path)")
        // A file that cannot be opened now: the first open's error already said why.
        guard let descriptor = try? ClaimedFile.openRegularFile(path, expected: expected) else { return nil }
        // The input owns the descriptor from here, so it is closed whether or not libarchive starts.
        let input = ArchiveInput(descriptor: descriptor, blockSize: 16 * 1024, budget: .unbounded, path: path)
        guard let archive = archive_read_new() else { return nil }
        defer { archive_read_free(archive) }
        archive_read_append_filter(archive, filter)
        archive_read_support_format_raw(archive)
        archive_read_set_read_callback(archive) { ArchiveInput.read($0, $1, $2) }
        archive_read_set_callback_data(archive, Unmanaged.passUnretained(input).toOpaque())
        // libarchive reports any failure to unpack the first block as an unknown format, and the
        // raw format takes any byte: a failure here is the stream's. Cut short when it had read
        // the whole file, else damaged.
        func broken(_ detail: String) -> BundleError {
            input.reachedEnd
                ? BundleError(.truncated, culprit: path, message: "the \(name) stream ends early (\(detail))")
                : BundleError(.damaged, culprit: path, message: "the \(name) stream is damaged (\(detail))")
        }
        var entry: OpaquePointer?
        guard archive_read_open1(archive) == ARCHIVE_OK, archive_read_next_header(archive, &entry) == ARCHIVE_OK else {
            return broken("its first block cannot be unpacked")
        }
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var filled = 0
        while filled < buffer.count {
            let count = buffer.withUnsafeMutableBytes {
                archive_read_data(archive, $0.baseAddress! + filled, $0.count - filled)
            }
            if count < 0 { return broken(errorString(archive) ?? "unknown error") }
            if count == 0 { break }
            filled += count
        }
        guard let inner = CompressionMagic(prefix: buffer.prefix(filled)) else { return nil }
        return BundleError(
            .nestedCompression, culprit: path,
            message: "\(inner.rawValue) data inside the \(name) stream: a bundle has at most one compression filter")
    }

    static func errorString(_ archive: OpaquePointer) -> String? {
        archive_error_string(archive).map { String(cString: $0) }
    }
}
