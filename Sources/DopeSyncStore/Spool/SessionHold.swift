import Crypto
import DopeSyncBundle
import DopeSyncSupport
import Foundation
import Synchronization
import ThreadRules

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A bundle's hold on its session while it uploads: one bundle of a session at a time, in the
/// whole spool.
///
/// Why: two bundles of one session sent at once (two slots of a run, two overlapping runs, two
/// hosts on one spool) each record the same steps' intents and look on the server before the
/// other's records are there: against an API that ignores `Idempotency-Key`, both send them and
/// the records exist twice; where keys hold, the older bundle's body can stand under the newer
/// bundle's checkpoint. One after the other, each resumes where the server stands.
///
/// One host: a `flock` on `.sessions/ID` in the spool, held by the open file, so it ends with the
/// process whatever ends it, and it excludes other descriptors of the same process too. The files
/// stay, empty, one per session seen, until `prune` removes those no bundle holds
/// (``Spool/pruneSessionHolds(before:)``). Several hosts: the shared store keeps it with the bundle's
/// claim (``ClaimStorage/holdSession(_:of:)``), since a flock would outlive a paused worker's lease.
public final class SessionHold: Sendable {
    public let sessionID: String
    /// The lock file's descriptor; nil for a hold the store keeps (``heldByTheStore(_:)``).
    private let descriptor: Mutex<Int32?>

    private init(sessionID: String, descriptor: Int32?) {
        self.sessionID = sessionID
        self.descriptor = Mutex(descriptor)
    }

    /// A hold kept by a shared store, which ends with the bundle's claim: nothing to release here.
    package static func heldByTheStore(_ sessionID: String) -> SessionHold {
        SessionHold(sessionID: sessionID, descriptor: nil)
    }

    /// Lets the session go. Idempotent. A `close`, which may wait for an NFS server: on the
    /// spool's threads, as every spool call.
    public func release() {
        BlockingCalls.check("releasing the hold on session \(sessionID)")
        guard let descriptor = descriptor.withLock({ $0.take() }) else { return }
        SpoolFiles.unlockAndClose(descriptor)
    }

    /// Whether nothing is left to release (a store's hold never has anything).
    public var isReleased: Bool { descriptor.withLock { $0 == nil } }

    // The last reference may go on an event loop.
    deinit { if let descriptor = descriptor.withLock({ $0.take() }) { SpoolCalls.closeLater(descriptor) } }

    /// The folder of the holds, inside the spool (hidden: not a folder of the queue).
    public static let folder = ".sessions"

    /// A file name for `sessionID`: the UUID itself in lowercase (validation allows nothing else),
    /// else its SHA-256, so that no id can name a path.
    static func fileName(_ sessionID: String) -> String {
        SessionFieldFormats.canonicalUUID(sessionID) ?? "sha256-" + SHA256.hash(data: Array(sessionID.utf8)).hexString
    }

    /// Holds `sessionID` for the caller, or nil when another bundle holds it now (in this process
    /// or another). Throws when the hold cannot be asked for at all (no lock support, a spool that
    /// cannot be written): the caller decides whether to go on without it.
    static func take(_ sessionID: String, in spool: Spool) throws(SpoolError) -> SessionHold? {
        BlockingCalls.check("holding session \(sessionID)")
        let folder = spool.root + "/" + Self.folder
        if mkdir(folder, 0o700) != 0 && errno != EEXIST {
            let error = errno
            throw SpoolError(
                code: .notWritable, message: Spool.notWritableMessage(spool.root, error: error), path: folder,
                errno: error)
        }
        let path = folder + "/" + fileName(sessionID)
        // `prune` may remove the file between this open and the lock (it removes only files it
        // has locked itself): a lock on a file no longer at the path holds nothing, so open again.
        for _ in 0..<8 {
            let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
            guard descriptor >= 0 else {
                let error = errno
                throw SpoolError(
                    code: .notWritable, message: Spool.notWritableMessage(folder, error: error), path: path,
                    errno: error)
            }
            let error = SpoolFiles.tryLock(descriptor, LOCK_EX)
            guard error == 0 else {
                close(descriptor)
                if error == EWOULDBLOCK { return nil }
                throw SpoolError(code: .claimFailed, message: "cannot lock the session", path: path, errno: error)
            }
            if SpoolFiles.identity(ofDescriptor: descriptor)?.file == SpoolFiles.identity(ofPath: path) {
                return SessionHold(sessionID: sessionID, descriptor: descriptor)
            }
            close(descriptor)
        }
        throw SpoolError(code: .claimFailed, message: "the session's lock kept being removed", path: path)
    }

    /// Removes the lock files of sessions no bundle holds and none took since `cutoff` (by the
    /// file's mtime, which taking a hold does not change: a session last sent long ago), each
    /// under its own lock, so that a worker opening it meanwhile opens it again. Returns how many.
    static func prune(in spool: Spool, before cutoff: Date) -> Int {
        BlockingCalls.check("pruning the sessions' locks")
        let folder = spool.root + "/" + Self.folder
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return 0 }
        var removed = 0
        for name in names {
            let path = folder + "/" + name
            var info = stat()
            guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, spoolDate(info.st_mtim) < cutoff else {
                continue
            }
            // For writing: over NFS an exclusive lock needs it (EBADF otherwise). The worker's own file.
            let descriptor = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
            guard descriptor >= 0 else { continue }
            defer { SpoolFiles.unlockAndClose(descriptor) }
            guard SpoolFiles.tryLock(descriptor, LOCK_EX) == 0,
                SpoolFiles.identity(ofDescriptor: descriptor)?.file == SpoolFiles.identity(ofPath: path)
            else { continue }
            if unlink(path) == 0 { removed += 1 }
        }
        return removed
    }
}

extension Spool {
    /// Holds `sessionID` while one of its bundles uploads (``SessionHold``); nil while another does.
    public func holdSession(_ sessionID: String) throws(SpoolError) -> SessionHold? {
        try SessionHold.take(sessionID, in: self)
    }

    /// Removes the lock files of sessions held by no bundle and created before `cutoff`; how many.
    public func pruneSessionHolds(before cutoff: Date) -> Int {
        SessionHold.prune(in: self, before: cutoff)
    }
}

/// What asking for a session's hold gave.
public enum SessionHoldOutcome: Sendable {
    /// The session is this bundle's until the hold is released (or, in a shared store, its claim ends).
    case held(SessionHold)
    /// Another bundle of the session is being uploaded now.
    case busy
    /// The hold cannot be had here (a file system without locks): the bundle goes on without it.
    case unavailable(reason: String)
    /// The spool cannot keep the holds' files (`.sessions/` or the spool's own folder read-only,
    /// another owner's, full): no bundle can be held, so the run gives this one back, stops
    /// claiming and exits 73, as when a folder of the queue refuses a move.
    case spoolNotWritable(reason: String)
    /// The store could not answer (a shared database's timeout, say): the bundle is given back,
    /// uncounted, since going on could send what the hold is there to keep from being sent twice.
    case failed(reason: String)
}
