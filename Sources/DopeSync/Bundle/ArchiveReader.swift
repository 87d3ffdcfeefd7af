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
    /// The entry's name as UTF-8 text; when it is not valid UTF-8, its bytes escaped (`\xfc`).
    var rawPath: String
    /// Why the name cannot be used (not UTF-8, or unreadable); the entry is then refused.
    var nameError: BundleError?
    var kind: ArchiveEntryKind
    /// The size the header declares, when it declares one (zip streams may not).
    var declaredSize: Int64?
    var isEncrypted: Bool
}

/// The compression a stream starts with, recognised by its first bytes. The four BUNDLE.md
/// allows, and the others only to name them in an error.
enum CompressionMagic: String, Sendable, CaseIterable {
    case gzip, bzip2, xz, zstd
    case lz4, lzip
    case compress = "compress (.Z)"
    case lzma
    case sevenZip = "7-Zip"
    case rar = "RAR"

    static let sniffLength = 6

    init?(prefix: some Collection<UInt8>) {
        let bytes = Array(prefix.prefix(Self.sniffLength))
        func starts(_ magic: [UInt8]) -> Bool { bytes.starts(with: magic) }
        if starts([0x1F, 0x8B]) {
            self = .gzip
        } else if starts([0x42, 0x5A, 0x68]), bytes.count > 3, (0x31...0x39).contains(bytes[3]) {
            self = .bzip2
        } else if starts([0xFD, 0x37, 0x7A, 0x58, 0x5A, 0x00]) {
            self = .xz
        } else if starts([0x28, 0xB5, 0x2F, 0xFD]) {
            self = .zstd
        } else if starts([0x04, 0x22, 0x4D, 0x18]) {
            self = .lz4
        } else if starts(Array("LZIP".utf8)) {
            self = .lzip
        } else if starts([0x1F, 0x9D]) {
            self = .compress
        } else if starts([0x5D, 0x00, 0x00]) {
            self = .lzma
        } else if starts([0x37, 0x7A, 0xBC, 0xAF, 0x27, 0x1C]) {
            self = .sevenZip
        } else if starts(Array("Rar!".utf8)) {
            self = .rar
        } else {
            return nil
        }
    }

    /// libarchive's code for a filter BUNDLE.md allows; nil for the others.
    var allowedFilter: Int32? {
        switch self {
        case .gzip: ARCHIVE_FILTER_GZIP
        case .bzip2: ARCHIVE_FILTER_BZIP2
        case .xz: ARCHIVE_FILTER_XZ
        case .zstd: ARCHIVE_FILTER_ZSTD
        default: nil
        }
    }
}

/// What bounds one reading of an archive besides ``BundleLimits``' sizes: a deadline and a run's
/// stop. Checked before every block libarchive reads from the file and after every block it hands
/// back, so a hostile stream or a signal ends the reading within one block.
public struct ReadBudget: Sendable {
    /// How long the reading may take (for the message), and when it must end.
    public var time: Duration?
    var deadline: ContinuousClock.Instant?
    /// A run's stop (SIGINT/SIGTERM): the reading ends, and the bundle is given back, not failed.
    public var stop: StopRequest?

    public init(time: Duration?, stop: StopRequest? = nil) {
        self.time = time
        self.deadline = time.map { ContinuousClock.now + $0 }
        self.stop = stop
    }

    public static let unbounded = ReadBudget(time: nil)

    /// Why reading must end now, if it must.
    func exceeded(culprit: String) -> BundleError? {
        if let stop, stop.isRequested {
            return BundleError(.readingStopped, culprit: culprit, message: "reading stopped: the run is stopping")
        }
        if let deadline, let time, ContinuousClock.now >= deadline {
            return BundleError(
                .overTimeBudget, culprit: culprit,
                message:
                    "reading took longer than its time budget of \(time.formattedSeconds): refused as a hostile or damaged archive"
            )
        }
        return nil
    }
}

extension Duration {
    /// `12 s`, `1.5 s`.
    var formattedSeconds: String {
        let tenths = (self / .milliseconds(100)).rounded()
        return tenths.truncatingRemainder(dividingBy: 10) == 0 ? "\(Int(tenths / 10)) s" : "\(tenths / 10) s"
    }
}

/// The file under an archive: libarchive pulls its blocks through these callbacks, so every read
/// can be refused once the ``ReadBudget`` is spent.
private final class ArchiveInput {
    let descriptor: Int32
    let block: UnsafeMutableRawBufferPointer
    let budget: ReadBudget
    let path: String
    /// Set when a callback refused to go on; it is the reason, libarchive's message is not.
    var interruption: BundleError?
    var readErrno: Int32 = 0
    /// Whether the file was read to its end: a stream that fails after that is cut short.
    var reachedEnd = false

    init(descriptor: Int32, blockSize: Int, budget: ReadBudget, path: String) {
        self.descriptor = descriptor
        self.block = .allocate(byteCount: blockSize, alignment: 16)
        self.budget = budget
        self.path = path
    }

    deinit {
        block.deallocate()
        close(descriptor)
    }

    static func from(_ clientData: UnsafeMutableRawPointer?) -> ArchiveInput {
        Unmanaged<ArchiveInput>.fromOpaque(clientData!).takeUnretainedValue()
    }

    static func read(
        _: OpaquePointer?, _ clientData: UnsafeMutableRawPointer?, _ buffer: UnsafeMutablePointer<UnsafeRawPointer?>?
    ) -> la_ssize_t {
        let input = ArchiveInput.from(clientData)
        if let reason = input.budget.exceeded(culprit: input.path) {
            input.interruption = reason
            return -1
        }
        while true {
            let count = Glibc.read(input.descriptor, input.block.baseAddress, input.block.count)
            if count < 0 && errno == EINTR { continue }
            if count < 0 { input.readErrno = errno }
            if count == 0 { input.reachedEnd = true }
            buffer?.pointee = UnsafeRawPointer(input.block.baseAddress)
            return count
        }
    }

    static func seek(_: OpaquePointer?, _ clientData: UnsafeMutableRawPointer?, _ offset: la_int64_t, _ whence: Int32)
        -> la_int64_t
    {
        let input = ArchiveInput.from(clientData)
        return la_int64_t(lseek(input.descriptor, off_t(offset), whence))
    }
}

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
/// Only the containers and filters of BUNDLE.md are enabled: tar (ustar, pax, GNU) and zip, and
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
final class ArchiveReader {
    private let archive: OpaquePointer
    private let input: ArchiveInput
    let path: String
    /// The file it must be, when it must be one (a claimed bundle).
    private let expected: FileIdentity?
    private var entryIndex = 0
    /// The compression filter the file starts with, if any.
    private let outerFilter: CompressionMagic?

    fileprivate init(path: String, expected: FileIdentity?, budget: ReadBudget, blockSize: Int) throws(BundleError) {
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
        archive_read_free(archive)
    }

    /// The next entry's header, or nil at the end of the archive.
    func nextHeader() throws(BundleError) -> ArchiveEntryHeader? {
        try checkBudget()
        var entry: OpaquePointer?
        let status = withUTF8Names { archive_read_next_header(archive, &entry) }
        switch status {
        case ARCHIVE_EOF:
            return nil
        case ARCHIVE_OK, ARCHIVE_WARN:
            guard let entry else { return nil }
            entryIndex += 1
            return header(of: entry, warning: status == ARCHIVE_WARN ? Self.errorString(archive) : nil)
        default:
            let error = unreadable(during: "reading the next entry")
            throw entryIndex == 0
                ? Self.explainNesting(error, path: path, expected: expected, filter: outerFilter) : error
        }
    }

    /// Reads up to `buffer.count` bytes of the current entry's data; 0 at its end.
    func readData(into buffer: UnsafeMutableRawBufferPointer) throws(BundleError) -> Int {
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

    /// Why reading failed: the budget's reason when a callback refused to go on, the file's read
    /// error when it could not be read, else libarchive's error turned into a code a person can act
    /// on (see ``code(libarchiveErrno:detail:opening:)``).
    private static func classify(
        _ archive: OpaquePointer, input: ArchiveInput, culprit: String, during activity: String?
    ) -> BundleError {
        if let interruption = input.interruption { return interruption }
        if input.readErrno != 0 {
            return BundleError(
                .io, culprit: culprit, message: "cannot read: \(String(cString: strerror(input.readErrno)))")
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
    static func code(libarchiveErrno: Int32, detail: String, opening: Bool) -> BundleError.Code {
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
    private static func explainNesting(
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

    private static func errorString(_ archive: OpaquePointer) -> String? {
        archive_error_string(archive).map { String(cString: $0) }
    }

    private func header(of entry: OpaquePointer, warning: String?) -> ArchiveEntryHeader {
        let rawPath: String
        var nameError: BundleError? = nil
        if let name = archive_entry_pathname(entry) {
            let bytes = UnsafeRawBufferPointer(start: name, count: strlen(name))
            if let text = String(validating: bytes, as: UTF8.self) {
                rawPath = text
            } else {
                rawPath = EntryName.escaped(bytes)
                nameError = BundleError(
                    .invalidEntryName, culprit: rawPath,
                    message:
                        "this entry's name is not valid UTF-8 (bytes that are not are shown as \\xNN); rename the file and pack the bundle again"
                )
            }
        } else {
            // A name flagged UTF-8 (zip) or given in a pax header that is not valid UTF-8:
            // libarchive cannot decode it and keeps none, so the entry can only be named by position.
            rawPath = "entry \(entryIndex)"
            nameError = BundleError(
                .invalidEntryName, culprit: rawPath,
                message: "the name of the archive's entry number \(entryIndex) is marked UTF-8 but is not valid UTF-8"
                    + (warning.map { " (libarchive: \($0))" } ?? ""))
        }
        let kind: ArchiveEntryKind
        if archive_entry_hardlink(entry) != nil {
            kind = .hardLink
        } else {
            switch UInt32(archive_entry_filetype(entry)) & Self.fileTypeMask {
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
            rawPath: rawPath,
            nameError: nameError,
            kind: kind,
            declaredSize: size,
            isEncrypted: archive_entry_is_encrypted(entry) != 0
        )
    }

    // AE_IFMT: libarchive's macros are casts, which Swift does not import.
    private static let fileTypeMask: UInt32 = 0o170000
}

/// Entry names for people.
enum EntryName {
    /// The name's bytes as text: printable ASCII as it is, every other byte as `\xNN`.
    static func escaped(_ bytes: some Sequence<UInt8>) -> String {
        var text = ""
        for byte in bytes {
            if (0x20..<0x7F).contains(byte) && byte != UInt8(ascii: "\\") {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                text += "\\x" + [byte].hexString
            }
        }
        return text
    }
}

/// Opens the archive at `path` and lends a reader to `body`; the reader closes when `body` is
/// done with it (unless `body` keeps it: then use ``ArchiveReader/opening(path:budget:blockSize:)``).
func withArchiveReader<T>(
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
    static func opening(
        path: String, expected: FileIdentity? = nil, budget: ReadBudget = .unbounded, blockSize: Int = 64 * 1024
    ) throws(BundleError) -> ArchiveReader {
        try ArchiveReader(path: path, expected: expected, budget: budget, blockSize: blockSize)
    }
}
