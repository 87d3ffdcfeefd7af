import CSystemCalls
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
/// One host: a write lock on one byte of `.dopesync.sessions.lock` in the spool, the byte the
/// session's id hashes to (``byte(of:)``), taken as an open file description's lock (`F_OFD_SETLK`)
/// on a descriptor of its own. So it ends with the process whatever ends it, another descriptor of
/// the same process is refused too, and no file is made per session: the worker made one in
/// `.sessions/` for each, and on a file system that searches long for a free inode (ext4 without
/// a journal, after many deletions) that cost a run CPU it could measure (BENCHMARKS.md,
/// "The hold's cost"). Two sessions whose ids share a byte wait for each other: with 2^31 bytes and
/// 64 bundles uploading, one bundle in 30 million waits for a later run so.
///
/// Builds from 2026-11-28 to 2026-12-07 locked `.sessions/ID` with `flock` instead. Once a run has
/// seen another process hold the checkpoints' lock (another run, maybe of such a build: as it
/// took that lock, ``StoreLock/othersHeldItWhenTaken``, then as `SpoolClaims.OlderRunsWatch` asks), each
/// of its holds takes that file's lock too, as they did. Where locks of open file descriptions do not
/// exist, that file's lock is the hold.
///
/// Several hosts: the shared store keeps the hold with the bundle's claim
/// (``ClaimStorage/holdSession(_:of:)``), since a lock would outlive a paused worker's lease.
public final class SessionHold: Sendable {
    public let sessionID: String
    /// The descriptors holding the byte's lock and, beside a run of an older version, the
    /// `.sessions/ID` file's; nil for a hold the store keeps (``heldByTheStore(_:)``).
    private let descriptors: Mutex<Descriptors?>

    private struct Descriptors {
        let byte: Int32?
        let legacyFile: Int32?

        func unlockAndClose() {
            if let byte { SessionHold.unlockAndClose(byte) }
            if let legacyFile { SpoolFiles.unlockAndClose(legacyFile) }
        }
    }

    private init(sessionID: String, descriptors: Descriptors?) {
        self.sessionID = sessionID
        self.descriptors = Mutex(descriptors)
    }

    /// A hold kept by a shared store, which ends with the bundle's claim: nothing to release here.
    package static func heldByTheStore(_ sessionID: String) -> SessionHold {
        SessionHold(sessionID: sessionID, descriptors: nil)
    }

    /// Lets the session go. Idempotent. A `close`, which may wait for an NFS server: on the
    /// spool's threads, as every spool call.
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func release() {
        BlockingCalls.check("releasing the hold on session \(sessionID)")
        descriptors.withLock { $0.take() }?.unlockAndClose()
    }

    /// Whether nothing is left to release (a store's hold never has anything).
    public var isReleased: Bool { descriptors.withLock { $0 == nil } }

    // The last reference may go on an event loop.
    deinit {
        if let descriptors = descriptors.withLock({ $0.take() }) {
            SpoolCalls.later { descriptors.unlockAndClose() }
        }
    }

    /// The file whose bytes are the holds, in the spool (hidden: not a folder of the queue).
    public static let fileName = ".dopesync.sessions.lock"

    /// The folder of the holds of versions before ``fileName``, one empty file per session.
    public static let legacyFolder = ".sessions"

    /// The byte of ``fileName`` that holds `sessionID`: 31 bits of the SHA-256 of its canonical
    /// form, so it stays within the offsets every lock protocol carries (NFS v3's NLM among them).
    package static func byte(of sessionID: String) -> Int {
        let digest = SHA256.hash(data: Array(legacyFileName(sessionID).utf8))
        return digest.prefix(4).reduce(0) { $0 << 8 | Int($1) } & 0x7FFF_FFFF
    }

    /// A file name for `sessionID` in ``legacyFolder``: the UUID itself in lowercase (validation
    /// allows nothing else), else its SHA-256, so that no id can name a path.
    static func legacyFileName(_ sessionID: String) -> String {
        SessionFieldFormats.canonicalUUID(sessionID) ?? "sha256-" + SHA256.hash(data: Array(sessionID.utf8)).hexString
    }

    /// Holds `sessionID` for the caller, or nil when another bundle holds it now (in this process
    /// or another). With `besideOlderVersions`, also holds its file in ``legacyFolder``, as a run
    /// of an older version would. Throws when the hold cannot be asked for at all (no lock
    /// support, a spool that cannot be written): the caller decides whether to go on without it.
    static func take(_ sessionID: String, in spool: Spool, besideOlderVersions: Bool = false) throws(SpoolError)
        -> SessionHold?
    {
        BlockingCalls.check("holding session \(sessionID)")
        let path = spool.root + "/" + fileName
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            let error = errno
            throw SpoolError(
                code: .notWritable, message: cannotOpenMessage(path, in: spool, error: error), path: path,
                errno: error)
        }
        // nil where there are no locks of open file descriptions (a kernel before Linux 3.15,
        // another system): then the session's own file is the hold, as versions before this one had.
        var byteHeld: Int32? = descriptor
        switch dopesync_ofd_lock_byte(descriptor, Int64(byte(of: sessionID)), 1) {
        case 0: break
        case EINVAL, ENOSYS:
            close(descriptor)
            byteHeld = nil
        case EAGAIN, EACCES:
            close(descriptor)
            return nil
        case let error:
            close(descriptor)
            throw SpoolError(code: .claimFailed, message: "cannot lock the session", path: path, errno: error)
        }
        guard besideOlderVersions || byteHeld == nil else {
            return SessionHold(sessionID: sessionID, descriptors: Descriptors(byte: byteHeld, legacyFile: nil))
        }
        do {
            if let legacyFile = try takeLegacy(sessionID, in: spool) {
                return SessionHold(
                    sessionID: sessionID, descriptors: Descriptors(byte: byteHeld, legacyFile: legacyFile))
            }
            byteHeld.map(unlockAndClose)
            return nil
        } catch {
            byteHeld.map(unlockAndClose)
            throw error
        }
    }

    /// Why ``fileName`` could not be opened, and what to put right: the file, where it is there
    /// and refuses this user; the spool's folder, where the file is missing and could not be made;
    /// else the system's words (no descriptor left, say).
    private static func cannotOpenMessage(_ path: String, in spool: Spool, error: Int32) -> String {
        guard [EACCES, EPERM, EROFS].contains(error) else {
            return "cannot open the sessions' lock file: \(String(cString: strerror(error)))"
        }
        var info = stat()
        return lstat(path, &info) == 0
            ? Spool.notWritableMessage(path, error: error, kind: "file")
            : Spool.notWritableMessage(spool.root, error: error)
    }

    /// Ends the byte's lock, then closes the descriptor. The unlock comes first, as in
    /// ``SpoolFiles/unlockAndClose(_:)``: a child forked meanwhile shares the open file until its `exec`.
    private static func unlockAndClose(_ descriptor: Int32) {
        _ = dopesync_ofd_lock_byte(descriptor, 0, 0)
        close(descriptor)
    }

    /// The `flock` on `.sessions/ID` that versions before ``fileName`` took; its descriptor, or
    /// nil while one of them holds it.
    private static func takeLegacy(_ sessionID: String, in spool: Spool) throws(SpoolError) -> Int32? {
        let folder = spool.root + "/" + legacyFolder
        if mkdir(folder, 0o700) != 0 && errno != EEXIST {
            let error = errno
            throw SpoolError(
                code: .notWritable, message: Spool.notWritableMessage(spool.root, error: error), path: folder,
                errno: error)
        }
        let path = folder + "/" + legacyFileName(sessionID)
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
                return descriptor
            }
            close(descriptor)
        }
        throw SpoolError(code: .claimFailed, message: "the session's lock kept being removed", path: path)
    }

    /// Removes the files in ``legacyFolder`` of sessions no bundle holds and none took since
    /// `cutoff` (by the file's mtime, which taking a hold does not change: a session last sent
    /// long ago), each under its own lock, so that a run opening it meanwhile opens it again.
    /// Returns how many.
    static func prune(in spool: Spool, before cutoff: Date) -> Int {
        BlockingCalls.check("pruning the sessions' locks")
        let folder = spool.root + "/" + legacyFolder
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
    /// Holds `sessionID` while one of its bundles uploads (``SessionHold``); nil while another
    /// does. `besideOlderVersions`: also as versions before ``SessionHold/fileName`` held it.
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func holdSession(_ sessionID: String, besideOlderVersions: Bool = false) throws(SpoolError)
        -> SessionHold?
    {
        try SessionHold.take(sessionID, in: self, besideOlderVersions: besideOlderVersions)
    }

    /// Removes the files in ``SessionHold/legacyFolder`` of sessions held by no bundle and created
    /// before `cutoff`; how many.
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
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
