import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The cross-process write lock (`SQLiteOptions.writeLockPath`), taken with `flock(2)` but waited
/// for no longer than the busy timeout: a process stopped or hung while it holds the lock must not
/// hold every other writer for good. Past the timeout a write fails with SQLITE_BUSY, as a
/// statement waiting for SQLite's own locks does.
///
/// Once a wait has run out, later writes try the lock once instead of waiting again: a run that
/// stops because of a stuck lock then stops in one timeout, not one for each write still to come
/// (giving bundles back, recording the run). If the holder has let go, that one try succeeds.
final class WriteLock: Sendable {
    let descriptor: Int32
    let path: String
    let timeoutMilliseconds: Int32
    private let ranOut = Atomic<Bool>(false)

    /// Opens (and creates) the lock file at `path`; the descriptor is closed with the lock.
    init(path: String, timeoutMilliseconds: Int32) throws(SQLiteError) {
        // Never through a symlink, and readable by nobody else: it sits beside the database.
        let descriptor = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw SQLiteError(code: .cantOpen, message: "cannot open lock file \(path): errno \(errno)")
        }
        self.descriptor = descriptor
        self.path = path
        self.timeoutMilliseconds = timeoutMilliseconds
    }

    deinit { close(descriptor) }

    func acquire() throws(SQLiteError) {
        // The usual case, once per transaction: free at once, no clock read.
        if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return lockTaken() }
        let wait = ranOut.load(ordering: .relaxed) ? 0 : timeoutMilliseconds
        let deadline = ContinuousClock.now + .milliseconds(Int(wait))
        var pause: UInt32 = 100  // microseconds, doubling to 5 ms: often enough to find a busy peer's gaps
        while true {
            let failure = errno
            guard failure == EWOULDBLOCK || failure == EINTR else {
                throw SQLiteError(code: .ioError, message: "cannot lock \(path): errno \(failure)")
            }
            guard ContinuousClock.now < deadline else {
                ranOut.store(true, ordering: .relaxed)
                throw SQLiteError(
                    code: .busy,
                    message: "another process held the write lock \(path) for more than \(timeoutMilliseconds) ms")
            }
            usleep(pause)
            pause = min(pause * 2, 5_000)
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return lockTaken() }
        }
    }

    private func lockTaken() {
        if ranOut.load(ordering: .relaxed) { ranOut.store(false, ordering: .relaxed) }
    }

    func release() { flock(descriptor, LOCK_UN) }
}
