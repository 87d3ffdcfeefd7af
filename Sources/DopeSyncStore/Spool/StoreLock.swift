import DopeSyncSupport
import Synchronization
import ThreadRules

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Who may use the spool's own SQLite checkpoints: every `dopesync run` on them at once, or
/// `dopesync migrate` alone. A `flock` on `.dopesync.store.lock` in the spool, shared by runs,
/// exclusive for a migration, so a run started (by `dopesync.path`, say) while its checkpoints
/// are copied into PostgreSQL cannot write steps the copy has already passed, and a migration
/// cannot begin under a run that has not claimed anything yet. Held by the open file: it ends
/// with the process, whatever ends it.
public final class StoreLock: Sendable {
    private let descriptor: Mutex<Int32?>
    /// Whether another process held the lock when a run took it (``Mode/run``): another run (of
    /// this build or an older one) or a command; always false for the other modes. Told
    /// exactly where `flock` can take the lock exclusive for a moment (``take(_:in:)``); where it
    /// cannot (NFS, where an exclusive lock needs a writable descriptor), as `/proc/locks` tells
    /// (``isHeldByAnotherProcess(_:)``).
    public let othersHeldItWhenTaken: Bool

    private init(descriptor: Int32, othersHeldItWhenTaken: Bool) {
        self.descriptor = Mutex(descriptor)
        self.othersHeldItWhenTaken = othersHeldItWhenTaken
    }

    /// Lets the lock go now (a close, which may wait for an NFS server: off the event loops).
    /// Idempotent; without it, the lock goes with the last reference, a moment later.
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func release() {
        BlockingCalls.check("spool: letting go of the checkpoints' lock")
        if let descriptor = descriptor.withLock({ $0.take() }) { SpoolFiles.unlockAndClose(descriptor) }
    }

    // The last reference may go on an event loop.
    deinit { if let descriptor = descriptor.withLock({ $0.take() }) { SpoolCalls.closeLater(descriptor) } }

    /// The lock file's path in `spool`.
    public static func path(_ spool: Spool) -> String { spool.root + "/.dopesync.store.lock" }

    public enum Mode: Sendable {
        /// A run's: shared, any number at once, and told whether another process held it
        /// (``othersHeldItWhenTaken``).
        case run
        /// A command's (`requeue`, `prune`): shared, as a run's.
        case shared
        /// A migration's: alone.
        case exclusive
    }

    /// Whether a process other than this one may hold a lock on the file now: another run, of
    /// this version or an older one, or a migration. From `/proc/locks`, which lists each lock on
    /// the machine with its file's inode (an inode of another file system with the same number
    /// counts too). True wherever that list may leave one out, the careful answer for
    /// ``SessionHold``: where it cannot be read, and in a PID namespace of its own (a container),
    /// where the kernel leaves out the locks of processes outside it. Read a page at a time while
    /// locks come and go, the list can miss one: a run asks so only after its start, once a minute,
    /// for a run that took the lock after its own (``othersHeldItWhenTaken`` answers at the start).
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public static func isHeldByAnotherProcess(_ spool: Spool) -> Bool {
        BlockingCalls.check("spool: asking who holds the checkpoints' lock")
        var info = stat()
        guard stat(path(spool), &info) == 0 else { return errno != ENOENT }  // no run has made it
        guard seesEveryProcessesLocks, let locks = fopen("/proc/locks", "r") else { return true }
        defer { fclose(locks) }
        let (me, inode) = (getpid(), ":\(info.st_ino)")
        var line: UnsafeMutablePointer<CChar>? = nil
        defer { free(line) }
        var capacity = 0
        while getline(&line, &capacity, locks) > 0, let line {
            // "1: FLOCK  ADVISORY  READ 1234 fd:00:5678 0 EOF", or "1: -> FLOCK …" for a waiter.
            var fields = String(cString: line).split(separator: " ").dropFirst()
            if fields.first == "->" { fields = fields.dropFirst() }
            let (pid, file) = (fields.dropFirst(3).first, fields.dropFirst(4).first)
            if let file, file.hasSuffix(inode), pid != "\(me)" { return true }
        }
        return false
    }

    /// Whether this process is in the machine's first PID namespace, whose `/proc/locks` lists
    /// every process's locks (`PROC_PID_INIT_INO`, fixed in the kernel, names it).
    package static let seesEveryProcessesLocks: Bool = {
        var name = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/self/ns/pid", &name, name.count - 1)
        return length > 0 && String(cCharacters: name) == "pid:[4026531836]"
    }()

    /// Takes the lock in `mode` without waiting: nil while the other kind holds it. Throws when
    /// the file cannot be opened or made (a spool whose folder this user may not write).
    ///
    /// A run's is asked exclusive first, for the moment of two calls: granted, no other process
    /// held it, and it is made shared at once (``othersHeldItWhenTaken``). This answers exactly
    /// where `/proc/locks` cannot: the kernel hands that list out a page per read, so a reader
    /// among many locks that come and go can miss one (asks made while the test suite ran
    /// did). A run or command of this build refused in that moment asks again
    /// (``takeShared(_:)``); one of an older build takes it for a migration and waits for the
    /// next timer.
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public static func take(_ mode: Mode, in spool: Spool) throws(SpoolError) -> StoreLock? {
        BlockingCalls.check("spool: locking the checkpoints' store")
        let path = path(spool)
        // Readable by all: a lock file made by root (`--allow-root`) must not lock a run out. A
        // migration opens it for writing: over NFS, `flock` is a byte-range lock, and an
        // exclusive one needs a descriptor open for writing (EBADF otherwise).
        let access = mode == .exclusive ? O_RDWR : O_RDONLY
        let descriptor = open(path, access | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard descriptor >= 0 else {
            let error = errno
            throw SpoolError(
                code: .notWritable, message: "cannot open the checkpoints' lock", path: path, errno: error)
        }
        var othersHeldIt = false
        var error: Int32
        switch mode {
        case .exclusive:
            error = SpoolFiles.tryLock(descriptor, LOCK_EX)
        case .shared:
            error = takeShared(descriptor)
        case .run:
            let probe = SpoolFiles.tryLock(descriptor, LOCK_EX)
            // Nobody else held it: made shared, a downgrade that waits for nobody on Linux.
            error = probe == 0 ? SpoolFiles.tryLock(descriptor, LOCK_SH) : probe
            if error != 0 {
                // Another process holds it; or this file system cannot take it exclusive through a
                // descriptor open for reading (EBADF over NFS), or cannot make it shared in place:
                // then `/proc/locks` answers, as well as it can, once the shared lock is held.
                if probe == 0 { flock(descriptor, LOCK_UN) }
                let refused = probe == EWOULDBLOCK
                error = takeShared(descriptor)
                othersHeldIt = refused || (error == 0 && isHeldByAnotherProcess(spool))
            }
        }
        guard error == 0 else {
            SpoolFiles.unlockAndClose(descriptor)
            if error == EWOULDBLOCK { return nil }
            throw SpoolError(
                code: .claimFailed, message: "cannot lock the checkpoints' store", path: path, errno: error)
        }
        return StoreLock(descriptor: descriptor, othersHeldItWhenTaken: othersHeldIt)
    }

    /// A shared lock on `descriptor`, asked again for up to a second while refused: another run
    /// holds it exclusive for the moment of its own ``take(_:in:)`` (a process descheduled
    /// between its two calls, a CPU quota or a pause, for longer), a migration for its whole copy.
    /// Returns 0 or the last errno.
    private static func takeShared(_ descriptor: Int32) -> Int32 {
        var error = SpoolFiles.tryLock(descriptor, LOCK_SH)
        for _ in 0..<50 where error == EWOULDBLOCK {
            usleep(20_000)
            error = SpoolFiles.tryLock(descriptor, LOCK_SH)
        }
        return error
    }
}
