import DopeSyncBundle
import DopeSyncSupport

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An error from the spool: a stable ``code``, a human ``message``, the path it concerns and the `errno`.
///
/// ``Code/cannotCreate`` and ``Code/notWritable`` mean "the spool cannot be created or written"
/// (exit 73, `EX_CANTCREAT`, in the CLI).
public struct SpoolError: Error, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Sendable {
            case cannotCreate = "cannot_create"
            case notWritable = "not_writable"
            case scanFailed = "scan_failed"
            case claimFailed = "claim_failed"
            case moveFailed = "move_failed"
            case notClaimed = "not_claimed"
            case sidecarFailed = "sidecar_failed"
            case runningAsRoot = "running_as_root"
            case unreadableOrphan = "unreadable_orphan"
            case notLockable = "not_lockable"
            case lockFailed = "lock_failed"
        }
        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// A spool folder could not be created.
        public static let cannotCreate = Code(.cannotCreate)
        /// A spool folder exists but this user cannot write into it.
        public static let notWritable = Code(.notWritable)
        /// A folder could not be listed.
        public static let scanFailed = Code(.scanFailed)
        /// A bundle could not be opened, locked or renamed for a reason other than a lost race.
        public static let claimFailed = Code(.claimFailed)
        /// A bundle could not be moved to its target folder (it stays where it was, still claimed).
        public static let moveFailed = Code(.moveFailed)
        /// The claim was already released or its bundle already moved out of `processing/`.
        public static let notClaimed = Code(.notClaimed)
        /// `failed/NAME.error` could not be written (the bundle was not moved).
        public static let sidecarFailed = Code(.sidecarFailed)
        /// Root on a spool that belongs to another user, without `--allow-root`: nothing written.
        public static let runningAsRoot = Code(.runningAsRoot)
        /// A bundle left in `processing/` by a run that died cannot be opened by this user: it
        /// waits there for a person (exit 73), and the other bundles go on.
        public static let unreadableOrphan = Code(.unreadableOrphan)
        /// A bundle cannot be locked where an exclusive lock needs it open for writing (NFS) and
        /// this user may not write it: it waits where it is for a person (exit 73), and the other
        /// bundles go on.
        public static let notLockable = Code(.notLockable)
        /// A claim's lock on a bundle failed for a reason other than another holder (a file
        /// system without locks: ``SpoolError/noLockErrors``).
        public static let lockFailed = Code(.lockFailed)

        public var description: String { value.rawValue }
    }

    public let code: Code
    public let message: String
    public let path: String?
    /// The `errno` of the failed call, if one failed.
    public let errno: Int32?

    public init(code: Code, message: String, path: String? = nil, errno: Int32? = nil) {
        self.code = code
        self.message = message
        self.path = path
        self.errno = errno
    }

    /// What a folder answers for every write into it, whichever the bundle: read-only, no
    /// permission, no space or quota, another file system (`done/` mounted elsewhere), I/O errors.
    public static let folderWideErrors: Set<Int32> = [EROFS, EACCES, EPERM, ENOSPC, EDQUOT, EXDEV, EIO]

    /// What `flock` answers where the file system has no locks (an NFS v3 mount whose lock
    /// service is not running, some FUSE file systems).
    public static let noLockErrors: Set<Int32> = [ENOLCK, EOPNOTSUPP, ENOSYS]

    /// Whether the CLI should exit with 73 (`EX_CANTCREAT`).
    public var isSpoolUnwritable: Bool { code == .cannotCreate || code == .notWritable || code == .runningAsRoot }

    public var description: String {
        var text = message
        if let path { text += " (\(path))" }
        if let errno { text += ": \(String(cString: strerror(errno)))" }
        return text + " [\(code)]"
    }
}
