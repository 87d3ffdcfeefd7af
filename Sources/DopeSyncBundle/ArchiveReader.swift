import CArchive
import ThreadRules

#if canImport(Glibc)
    import Glibc
#endif

/// The UTF-8 character set for libarchive's name conversions (see the C shim for why).
private nonisolated(unsafe) let utf8NamesLocale = dopesync_utf8_ctype_locale()

/// Runs `body` with this thread's character set UTF-8, then restores the thread's own locale.
/// libarchive decodes zip and pax names into the calling thread's character set, so names are
/// read the same whatever `LANG` or `LC_ALL` say, or when cron and systemd set none.
private func withUTF8Names<T>(_ body: () -> T) -> T {
    guard let utf8NamesLocale else { return body() }
    let previous = uselocale(utf8NamesLocale)
    defer { uselocale(previous) }
    return body()
}

/// A forward-only reader over one archive file, wrapping libarchive.
///
/// Only the containers and filters of docs/bundle-format.md are enabled: tar (ustar, pax, GNU) and zip, and
/// at most one compression filter, gzip, bzip2, xz or zstd. The filter is chosen from the file's
/// first bytes and given to libarchive explicitly, which turns its filter detection off: a stream
/// nested in another (gzip in gzip, or a gzip stream that decompresses into itself, which sends
/// libarchive 3.6 into an endless, ever-growing pipeline) is never unpacked twice. Every other
/// format libarchive knows — mtree above all, whose reader pulls file contents from the local
/// disk — is never registered, so the archive is refused. The content decides, never the name.
///
/// Read one pass with ``withArchiveReader(path:budget:blockSize:_:)``; keep one open across calls
/// with ``opening(path:budget:blockSize:)`` (``BundleEntryReader`` does, between an upload's steps).
/// It closes the archive and its file when the last reference goes. Not Sendable: one task reads
/// it at a time.
package final class ArchiveReader {
    private let archive: OpaquePointer
    private let input: ArchiveInput
    let path: String
    /// The file it must be, when it must be one (a claimed bundle).
    private let expected: FileIdentity?
    private var entryIndex = 0
    /// The compression filter the file starts with, if any.
    private let outerFilter: CompressionMagic?

    fileprivate init(path: String, expected: FileIdentity?, budget: ReadBudget, blockSize: Int) throws(BundleError) {
        BlockingCalls.check("libarchive: opening \(path)")
        let descriptor = try ClaimedFile.openRegularFile(path, expected: expected)
        let input = ArchiveInput(descriptor: descriptor, blockSize: blockSize, budget: budget, path: path)
        var prefix = [UInt8](repeating: 0, count: CompressionMagic.sniffLength)
        let sniffed = pread(descriptor, &prefix, prefix.count, 0)
        let magic = CompressionMagic(prefix: prefix.prefix(max(sniffed, 0)))
        if let magic, magic.allowedFilter == nil {
            throw BundleError(
                .notAnArchive, culprit: path,
                message:
                    "\(magic.rawValue) data: a bundle is tar or zip, compressed with gzip, bzip2, xz or zstd or not at all"
            )
        }
        guard let archive = archive_read_new() else {
            throw BundleError(.io, culprit: path, message: "libarchive could not allocate a reader")
        }
        if let filter = magic?.allowedFilter {
            archive_read_append_filter(archive, filter)
        }
        archive_read_support_format_tar(archive)  // ustar, pax, GNU tar
        archive_read_support_format_zip(archive)  // seekable when the file allows it, else streamable
        archive_read_set_read_callback(archive) { ArchiveInput.read($0, $1, $2) }
        if magic == nil {
            // Seeking serves zip's central directory; under a compression filter nothing can seek,
            // and offering it there made a truncated stream look like no archive at all.
            archive_read_set_seek_callback(archive) { ArchiveInput.seek($0, $1, $2, $3) }
        }
        archive_read_set_callback_data(archive, Unmanaged.passUnretained(input).toOpaque())
        // Opened before `self` is complete, so a failure frees the handle here and deinit never runs.
        if withUTF8Names({ archive_read_open1(archive) }) != ARCHIVE_OK {
            let error = Self.explainNesting(
                Self.classify(archive, input: input, culprit: path, during: nil), path: path, expected: expected,
                filter: magic)
            archive_read_free(archive)
            throw error
        }
        self.archive = archive
        self.input = input
        self.path = path
        self.expected = expected
        self.outerFilter = magic
    }

    deinit {
        BlockingCalls.check("libarchive: closing \(path)")
        archive_read_free(archive)
    }

    /// The next entry's header, or nil at the end of the archive.
    package func nextHeader() throws(BundleError) -> ArchiveEntryHeader? {
        BlockingCalls.check("libarchive: reading an entry of \(path)")
        try checkBudget()
        var entry: OpaquePointer?
        let status = withUTF8Names { archive_read_next_header(archive, &entry) }
        switch status {
        case ARCHIVE_EOF:
            return nil
        case ARCHIVE_OK, ARCHIVE_WARN:
            guard let entry else { return nil }
            entryIndex += 1
            return ArchiveEntryHeader(
                entry: entry, index: entryIndex, warning: status == ARCHIVE_WARN ? Self.errorString(archive) : nil)
        default:
            let error = unreadable(during: "reading the next entry")
            throw entryIndex == 0
                ? Self.explainNesting(error, path: path, expected: expected, filter: outerFilter) : error
        }
    }

    /// Reads up to `buffer.count` bytes of the current entry's data; 0 at its end.
    package func readData(into buffer: UnsafeMutableRawBufferPointer) throws(BundleError) -> Int {
        BlockingCalls.check("libarchive: reading data of \(path)")
        try checkBudget()
        let count = archive_read_data(archive, buffer.baseAddress, buffer.count)
        if count < 0 { throw unreadable(during: "reading entry data") }
        return count
    }

    private func checkBudget() throws(BundleError) {
        if let reason = input.interruption ?? input.budget.exceeded(culprit: path) { throw reason }
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
        Self.classify(archive, input: input, culprit: path, during: activity)
    }
}

/// Opens the archive at `path` and lends a reader to `body`; the reader closes when `body` is
/// done with it (unless `body` keeps it: then use ``ArchiveReader/opening(path:budget:blockSize:)``).
@available(*, noasync, message: "blocks on the archive's file: call it on a thread of its own")
package func withArchiveReader<T>(
    path: String,
    expected: FileIdentity? = nil,
    budget: ReadBudget = .unbounded,
    blockSize: Int = 64 * 1024,
    _ body: (ArchiveReader) throws(BundleError) -> T
) throws(BundleError) -> T {
    try body(ArchiveReader.opening(path: path, expected: expected, budget: budget, blockSize: blockSize))
}

extension ArchiveReader {
    /// Opens the archive at `path` for a reader that is kept: it closes when its last reference goes.
    /// With `expected`, only that very file is read (see ``ClaimedFile/openRegularFile(_:expected:)``).
    package static func opening(
        path: String, expected: FileIdentity? = nil, budget: ReadBudget = .unbounded, blockSize: Int = 64 * 1024
    ) throws(BundleError) -> ArchiveReader {
        try ArchiveReader(path: path, expected: expected, budget: budget, blockSize: blockSize)
    }
}
