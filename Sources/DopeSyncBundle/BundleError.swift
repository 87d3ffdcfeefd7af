#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a bundle cannot be accepted: a stable code, the culprit (an entry path, a field path or
/// the bundle file) and a message for a person.
///
/// The code is what goes into `failed/NAME.error` (`reason:`) and into metrics; it never changes
/// meaning. New codes may be added without breaking anyone (a struct over a private enum).
public struct BundleError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable, CaseIterable {
            case notAnArchive = "not_an_archive"
            case truncated
            case damaged = "damaged_archive"
            case encryptedEntry = "encrypted_entry"
            case linkEntry = "link_entry"
            case specialEntry = "special_entry"
            case absolutePath = "absolute_path"
            case parentTraversal = "path_traversal"
            case badEntryPath = "bad_entry_path"
            case duplicatePath = "duplicate_path"
            case tooManyEntries = "too_many_entries"
            case tooManyBytes = "too_many_bytes"
            case compressionRatio = "decompression_bomb"
            case sessionTooLarge = "session_too_large"
            case missingSession = "missing_session"
            case invalidSession = "invalid_session"
            case missingImage = "missing_image"
            case unsupportedImageType = "unsupported_image_type"
            case manifestInvalid = "invalid_manifest"
            case manifestVersion = "unsupported_manifest_version"
            case manifestMismatch = "manifest_mismatch"
            case io = "io_error"
            case nestedCompression = "nested_compression"
            case invalidEntryName = "invalid_entry_name"
            case overTimeBudget = "over_time_budget"
            case readingStopped = "reading_stopped"
            case readerCrashed = "reader_crashed"
            case changedAfterValidation = "changed_after_validation"
            case replacedAfterClaim = "replaced_after_claim"
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// Every code, for the reference docs' test (each must be documented there).
        public static var all: [Code] { Base.allCases.map(Code.init) }

        /// Not a tar or zip archive in a format docs/bundle-format.md accepts (this includes mtree, cpio, ISO, 7-Zip…).
        public static let notAnArchive = Code(.notAnArchive)
        /// The archive or its compressed stream ends early.
        public static let truncated = Code(.truncated)
        /// The compressed stream or an entry is damaged.
        public static let damaged = Code(.damaged)
        public static let encryptedEntry = Code(.encryptedEntry)
        /// A symbolic or hard link.
        public static let linkEntry = Code(.linkEntry)
        /// A device, FIFO or socket.
        public static let specialEntry = Code(.specialEntry)
        public static let absolutePath = Code(.absolutePath)
        /// A path with a `..` component.
        public static let parentTraversal = Code(.parentTraversal)
        /// An empty path, or one with a NUL or backslash.
        public static let badEntryPath = Code(.badEntryPath)
        public static let duplicatePath = Code(.duplicatePath)
        public static let tooManyEntries = Code(.tooManyEntries)
        public static let tooManyBytes = Code(.tooManyBytes)
        /// The ratio of unpacked to compressed bytes passed the limit: a decompression bomb.
        public static let compressionRatio = Code(.compressionRatio)
        public static let sessionTooLarge = Code(.sessionTooLarge)
        public static let missingSession = Code(.missingSession)
        public static let invalidSession = Code(.invalidSession)
        public static let missingImage = Code(.missingImage)
        public static let unsupportedImageType = Code(.unsupportedImageType)
        public static let manifestInvalid = Code(.manifestInvalid)
        public static let manifestVersion = Code(.manifestVersion)
        public static let manifestMismatch = Code(.manifestMismatch)
        /// The file could not be read at all (permissions, I/O).
        public static let io = Code(.io)

        /// A compressed stream inside the compressed stream (gzip in gzip, xz in gzip…): one filter at most.
        public static let nestedCompression = Code(.nestedCompression)
        /// An entry whose name is not valid UTF-8 (never renamed, never left nameless).
        public static let invalidEntryName = Code(.invalidEntryName)
        /// Reading the bundle took longer than its time budget (``BundleLimits/readingTime(forFileOfSize:)``).
        public static let overTimeBudget = Code(.overTimeBudget)
        /// Reading was stopped because the run is stopping: not the bundle's fault, it is given back.
        public static let readingStopped = Code(.readingStopped)
        /// Reading the bundle was cut short by a crash or kill too often: it is not opened again.
        public static let readerCrashed = Code(.readerCrashed)
        /// The bytes read back for an upload are not the ones validated (the file was written to
        /// since), or an image holds its request's multipart boundary.
        public static let changedAfterValidation = Code(.changedAfterValidation)
        /// The path of a claimed bundle no longer names the file claimed (a symlink, a FIFO or
        /// another file was put there): nothing is read from it.
        public static let replacedAfterClaim = Code(.replacedAfterClaim)

        /// The short, stable text form (`decompression_bomb`), as written to sidecars and JSON.
        public var description: String { base.rawValue }
    }

    public let code: Code
    /// The entry path, the field path, or the bundle file the error is about.
    public let culprit: String
    public let message: String
    /// The `errno` of the system call that failed, for an error that is the system's answer
    /// (``Code/io``): EACCES is the producer's mode, EMFILE or EIO the machine's.
    public let systemErrno: Int32?

    public init(_ code: Code, culprit: String, message: String, systemErrno: Int32? = nil) {
        self.code = code
        self.culprit = culprit
        self.message = message
        self.systemErrno = systemErrno
    }

    /// Whether reading failed for a reason of the machine's (no descriptor left, memory, a disk
    /// or an NFS server failing), not of the file's: the bundle is not to blame, and a later
    /// reading may well succeed. A file its producer left unreadable (EACCES, EPERM) is to blame.
    public var isTheMachines: Bool {
        guard code == .io, let systemErrno else { return false }
        return systemErrno != EACCES && systemErrno != EPERM
    }

    public var description: String { culprit.isEmpty ? message : "\(culprit): \(message)" }
}

/// Every reason a bundle was refused, in the order they were found.
///
/// Reading stops at the first error that makes the rest of the archive untrustworthy (a bomb,
/// a truncated stream); everything else is collected so a person can fix all of it at once.
public struct BundleValidationError: Error, Sendable, CustomStringConvertible {
    public let bundle: String
    public let errors: [BundleError]

    public init(bundle: String, errors: [BundleError]) {
        precondition(!errors.isEmpty, "a validation error needs at least one reason")
        self.bundle = bundle
        self.errors = errors
    }

    /// The first error's code: the bundle's `reason` in its sidecar.
    public var code: BundleError.Code { errors[0].code }

    public var description: String {
        errors.map(\.description).joined(separator: "\n")
    }
}
