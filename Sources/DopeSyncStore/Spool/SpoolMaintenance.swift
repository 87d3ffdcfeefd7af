import DopeSyncBundle
import DopeSyncSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What operator commands (`status`, `requeue`, `prune`) do to the spool besides claiming.
extension Spool {
    /// What a look at a bundle in `processing/` finds (``lookAtClaim(_:)``).
    public enum ClaimLook: Sendable, Equatable {
        /// Its claimer is alive (true), or died (false).
        case held(Bool)
        /// Moved on since it was listed.
        case gone
        /// The worker (this user, who owns `processing/`) may not open it (`owner NAME, mode
        /// 0600`): no lock can be seen, and no run takes it back until the worker may read it.
        /// Another user's look at such a file is ``gone``: it says nothing of the worker's access.
        case unreadable(String)
        /// Its claimer died, and the worker may read it but not write it where an exclusive lock
        /// needs writing (NFS: `owner NAME, mode 0644`): no run takes it back until it may.
        case notLockable(String)
    }

    /// Whether a bundle in `processing/` is held by a live claimer; `.held(false)` means its
    /// claimer died: an orphan the next run takes back.
    ///
    /// This only looks: a shared lock is tried without waiting and dropped at once. While it is held (a few
    /// microseconds) a run's ``claimOrphan(_:)`` of the same file returns nil and simply takes it next run.
    /// Where the claimer died, the worker's look also tries the exclusive lock a run would take,
    /// through a second descriptor: on a local file system it fails against the look's own shared
    /// lock and takes nothing, and on NFS it tells a file the worker may not write (``ClaimLook/notLockable(_:)``).
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func lookAtClaim(_ entry: SpoolEntry) -> ClaimLook {
        let path = path(.processing, entry.name)
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        if descriptor < 0 && (errno == EACCES || errno == EPERM) {
            // Only the worker's own verdict says no run can take it back: another user (an
            // operator outside its group) may not open any claim, live ones included.
            guard isRunByItsWorker else { return .gone }
            return .unreadable(FileSystem.ownerAndMode(of: path) ?? "")
        }
        guard descriptor >= 0 else { return .gone }
        defer { SpoolFiles.unlockAndClose(descriptor) }
        let error = SpoolFiles.tryLock(descriptor, LOCK_SH)
        guard error == 0 else { return error == EWOULDBLOCK ? .held(true) : .gone }
        guard isRunByItsWorker, let ownerAndMode = exclusiveLockRefused(path) else { return .held(false) }
        return .notLockable(ownerAndMode)
    }

    /// The owner and mode of `path` when a run could not lock it: NFS v4 grants an exclusive lock
    /// only through a descriptor open for writing (EBADF otherwise), and the worker may not open it
    /// so. Nil where the lock is not refused that way. Call it holding a shared lock on the file
    /// through another descriptor, so that the exclusive lock tried here is never taken.
    private func exclusiveLockRefused(_ path: String) -> String? {
        let probe = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard probe >= 0 else { return nil }
        defer { SpoolFiles.unlockAndClose(probe) }
        guard SpoolFiles.tryLock(probe, LOCK_EX) == EBADF else { return nil }
        let writable = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard writable < 0 else {
            close(writable)
            return nil
        }
        // The refusals a run's claim names (``ClaimedBundle``'s `reopenForWriting`).
        guard errno == EACCES || errno == EPERM || errno == EROFS else { return nil }
        return FileSystem.ownerAndMode(of: path) ?? ""
    }

    /// Whether this user owns `processing/`, as the worker does: only its look says what a run can
    /// open or lock there, and only it makes the spool's shared files (the store's lock).
    package var isRunByItsWorker: Bool {
        var folder = stat()
        return stat(path(.processing), &folder) == 0 && folder.st_uid == geteuid()
    }

    /// `requeue`: moves `failed/NAME` back to `incoming/` with its mtime set to `now` where the worker
    /// owns it (a file modified after its last deferral is due at once, ``IncomingQueue``), without
    /// replacing a file of the same name there.
    /// Returns its name in `incoming/` (suffixed if taken). The sidecar is left for the caller.
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func requeueFailed(_ name: String, now: Date = Date()) throws(SpoolError) -> String {
        let source = path(.failed, name)
        var times = [timespec(tv_sec: 0, tv_nsec: SpoolFiles.utimeOmit), spoolTimespec(now)]
        if utimensat(AT_FDCWD, source, &times, AT_SYMLINK_NOFOLLOW) != 0 && errno != EPERM {
            throw SpoolError(
                code: .moveFailed, message: "cannot set the bundle's time before requeueing it", path: source,
                errno: errno)
        }
        let final = try SpoolFiles.moveNoReplace(source, toFolder: path(.incoming), name: name)
        SpoolFiles.syncDirectoriesAfterMove(path(.incoming), path(.failed))
        return final
    }

    /// `prune`: deletes `done/NAME` if it is still the file that was listed. Returns an errno or 0
    /// (ENOENT: already gone).
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func deleteDone(_ entry: SpoolEntry) -> Int32 {
        let target = path(.done, entry.name)
        guard SpoolFiles.identity(ofPath: target) == FileIdentity(device: entry.device, inode: entry.inode) else {
            return ENOENT
        }
        return unlink(target) == 0 ? 0 : errno
    }
}
