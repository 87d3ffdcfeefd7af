import CSystemCalls
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

/// A bundle this process owns: it sits in `processing/` and an open descriptor holds an exclusive
/// `flock` on it for as long as it is worked on.
///
/// Ownership is the lock, not a pid in a file: when the process dies (killed, crashed, rebooted) the
/// kernel drops the lock, and the next run finds the bundle in `processing/` with its lock free and takes
/// it back (``Spool/claimOrphan(_:)``). No liveness check, no clock, no stale pid reused after a reboot.
///
/// A move (``moveToDone()``, ``moveToFailed(_:)``, ``giveBack()``) renames the bundle out of
/// `processing/` while the lock is still held, then ends the claim. ``release()`` ends it without a move
/// (the bundle stays in `processing/` for the next run). Forgetting both is safe: `deinit` releases.
public final class ClaimedBundle: Sendable {
    public let spool: Spool
    /// The name in `processing/` (the same as it had in `incoming/`).
    public let name: String
    /// The size when claimed.
    public let size: Int64
    /// The mtime it had in `incoming/`.
    public let modified: Date
    /// True when it was taken back from a run that died, rather than claimed from `incoming/`.
    public let isOrphan: Bool
    /// Whether this claim's moves remove the names earlier moves of the file, cut short between
    /// their link and their unlink, left in other folders (``Spool/dropNamesOfCutShortMoves(of:file:keeping:)``):
    /// only while no other process can act on the file, that is, while this claim holds its flock
    /// and is no lease that can run out. A paused worker whose lease ran out may still wake and
    /// unlink a `processing/` name; the names it linked are then the bundle's only ones.
    let clearsCutShortMoves: Bool
    /// The file claimed: every read of ``path`` checks it is still this one.
    public let identity: FileIdentity
    /// The calls its moves are made of: the system's, or a test's faults.
    let renameCalls: SpoolFiles.RenameCalls
    /// The file's owner, as the spool's file system reports it: the producer its session is bound
    /// to. Named here, where the claim runs (the spool's threads): the user database may ask a
    /// directory server, which must never hold an event loop.
    public let owner: Producer

    private struct State {
        var descriptor: Int32?
    }
    private let state: Mutex<State>

    init(
        spool: Spool, name: String, descriptor: Int32, identity: FileIdentity, size: Int64, modified: Date,
        isOrphan: Bool, clearsCutShortMoves: Bool = false, renameCalls: SpoolFiles.RenameCalls
    ) {
        self.clearsCutShortMoves = clearsCutShortMoves
        self.spool = spool
        self.name = name
        self.identity = identity
        self.renameCalls = renameCalls
        self.size = size
        self.modified = modified
        self.isOrphan = isOrphan
        var info = stat()
        self.owner = Producer(uid: fstat(descriptor, &info) == 0 ? UInt32(info.st_uid) : UInt32(geteuid()))
        self.state = Mutex(State(descriptor: descriptor))
    }

    deinit {
        // The last reference may go on an event loop.
        if let descriptor = state.withLock({ $0.descriptor.take() }) { SpoolCalls.closeLater(descriptor) }
    }

    /// `processing/NAME`: where to read the bundle while it is claimed.
    public var path: String { spool.path(.processing, name) }

    /// Whether the claim is still held (no move and no release yet).
    public var isHeld: Bool { state.withLock { $0.descriptor != nil } }

    /// Ends the claim without moving the bundle: it stays in `processing/` and the next run takes it back.
    /// The session's hold this bundle's upload took (``SessionHold``), let go with the move that
    /// ends the claim, on the spool's thread that makes it: no trip of its own.
    private let sessionHold = Mutex<SessionHold?>(nil)

    /// Keeps `hold` until the bundle moves out of `processing/`.
    public func keep(_ hold: SessionHold) { sessionHold.withLock { $0 = hold } }

    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func release() {
        BlockingCalls.check("spool: letting go of processing/\(name)")
        state.withLock { state in
            if let descriptor = state.descriptor { SpoolFiles.unlockAndClose(descriptor) }
            state.descriptor = nil
        }
        // The session's hold ends with the claim, here rather than in its deinit, wherever that runs.
        sessionHold.withLock { $0.take() }?.release()
    }

    /// Moves the bundle to `done/` with its mtime set to now, and ends the claim. Returns its name there (suffixed if taken).
    /// Call it only after the last step's result is checkpointed.
    ///
    /// Every move here counts one that reported an error but happened (as a rename over NFS can) as done:
    /// ``SpoolFiles/renameNoReplace(_:_:of:calls:)`` looks where the claimed file is.
    @discardableResult
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func moveToDone() throws(SpoolError) -> String {
        try move(to: .done) { (descriptor: Int32) throws(SpoolError) -> String in
            // mtime = now, so `ls -l` in done/ says when it got there. Best effort: only the file's owner
            // may set it, and producers own their bundles (`prune` goes by the store's done time).
            var times = [
                timespec(tv_sec: 0, tv_nsec: SpoolFiles.utimeOmit),
                timespec(tv_sec: 0, tv_nsec: SpoolFiles.utimeNow),
            ]
            _ = futimens(descriptor, &times)
            let final = try SpoolFiles.moveNoReplace(
                path, toFolder: spool.path(.done), name: name, of: identity, calls: renameCalls)
            // Durable before the caller records "done": else a power loss could bring the bundle back into
            // processing/ after the database said done (harmless, it would be resumed, but confusing).
            // Best effort: the rename has happened, so reporting the move as failed would be wrong.
            SpoolFiles.syncDirectoriesAfterMove(spool.path(.done), spool.path(.processing))
            return final
        }
    }

    /// Writes `failed/NAME.error`, then moves the bundle to `failed/NAME`, and ends the claim. Returns the
    /// bundle's name in `failed/` (suffixed if taken; the sidecar's `bundle:` says the same name).
    ///
    /// The sidecar comes first and is synced before the bundle moves, so nobody ever sees a failed bundle
    /// without its reason. The sidecar's name is also the reservation of the name: it is created with
    /// no-replace semantics, so two processes failing bundles of the same name pick different suffixes.
    @discardableResult
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func moveToFailed(_ sidecar: ErrorSidecar) throws(SpoolError) -> String {
        try move(to: .failed) { (_: Int32) throws(SpoolError) -> String in
            let folder = spool.path(.failed)
            for n in 0..<100_000 {
                let candidate = Spool.suffixedName(name, n)
                let target = folder + "/" + candidate
                var text = sidecar
                text.bundle = candidate
                let sidecarPath = folder + "/" + Spool.sidecarName(forFailed: candidate)
                let held = SpoolFiles.identity(ofPath: target)
                // A move here cut short between its link and its unlink (NFS, then a crash) left
                // this bundle under both names: it is finished, with this failure's sidecar, rather
                // than the bundle taking a second name in failed/.
                let finishing = held == identity
                if held != nil && !finishing { continue }
                guard try placeSidecar(text, at: sidecarPath, replacing: finishing) else { continue }
                // The sidecar's entry must be on disk before the bundle's; if that cannot be made sure, the
                // bundle does not move (and the sidecar, which would describe nothing, goes).
                do throws(SpoolError) {
                    try FileSystem.syncDirectory(folder)
                } catch {
                    if !finishing { unlink(sidecarPath) }
                    throw error
                }
                let moveError = SpoolFiles.renameNoReplace(path, target, of: identity, calls: renameCalls)
                if moveError == EEXIST {
                    // A file of that name appeared without going through a sidecar (a person): this sidecar
                    // is ours and describes nothing; drop it and try the next name.
                    unlink(sidecarPath)
                    continue
                }
                guard moveError == 0 else {
                    // The sidecar goes with the move, unless the bundle is in failed/ after all (under both
                    // names, when neither name could be removed): never a failed bundle without its reason.
                    if SpoolFiles.identity(ofPath: target) != identity { unlink(sidecarPath) }
                    throw SpoolError(
                        code: .moveFailed, message: "cannot move bundle to \(folder)/\(candidate)", path: path,
                        errno: moveError)
                }
                SpoolFiles.syncDirectoriesAfterMove(folder, spool.path(.processing))
                return candidate
            }
            throw SpoolError(code: .moveFailed, message: "no free name for \(name)", path: folder)
        }
    }

    /// Writes `sidecar` at `sidecarPath` through a synced temporary file. Without `replacing`, the
    /// name is taken only if free (the reservation of the bundle's name in `failed/`): false when
    /// another process has it. With it, a sidecar of this very bundle there is brought up to date.
    private func placeSidecar(_ sidecar: ErrorSidecar, at sidecarPath: String, replacing: Bool) throws(SpoolError)
        -> Bool
    {
        let folder = spool.path(.failed)
        // Short whatever the bundle's name: a 250-byte name must still fail.
        let temporary = folder + "/.sidecar.\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        let writeError = SpoolFiles.writeSynced(sidecar.rendered(), to: temporary)
        guard writeError == 0 else {
            unlink(temporary)
            throw SpoolError(
                code: .sidecarFailed, message: "cannot write the error sidecar", path: temporary, errno: writeError)
        }
        let placeError =
            replacing
            ? (rename(temporary, sidecarPath) == 0 ? 0 : errno)
            : SpoolFiles.renameNoReplace(temporary, sidecarPath, calls: renameCalls)
        if placeError == EEXIST && !replacing {
            unlink(temporary)
            return false
        }
        guard placeError == 0 else {
            unlink(temporary)
            throw SpoolError(
                code: .sidecarFailed, message: "cannot place the error sidecar", path: sidecarPath, errno: placeError)
        }
        return true
    }

    /// Gives the bundle back to `incoming/` and ends the claim. Returns its name there (suffixed if taken:
    /// then tell the checkpoint store with ``CheckpointStore/renamed(from:to:now:)``).
    ///
    /// The file is left as it is, times included: a deferral's next-attempt time is the checkpoint
    /// store's (``IncomingQueue``), because only a file's owner may set its times, and producers own
    /// their bundles.
    @discardableResult
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func giveBack() throws(SpoolError) -> String {
        try move(to: .incoming) { (_: Int32) throws(SpoolError) -> String in
            let final = try SpoolFiles.moveNoReplace(
                path, toFolder: spool.path(.incoming), name: name, of: identity, calls: renameCalls)
            // Not strictly needed (a lost give-back leaves an orphan that is taken back), but a bundle
            // that reappears in processing/ after the database counted its attempt would be retried early.
            SpoolFiles.syncDirectoriesAfterMove(spool.path(.incoming), spool.path(.processing))
            return final
        }
    }

    /// Checks that the claim is held and `processing/NAME` is still our file, runs `body` with the claim's
    /// descriptor (the lock held, and the state locked so two moves of one claim cannot interleave), and
    /// ends the claim if it succeeded. A failed move keeps the claim: the caller may retry or release (the
    /// bundle then stays in `processing/` for the next run).
    private func move(to folder: Spool.Folder, _ body: (Int32) throws(SpoolError) -> String) throws(SpoolError)
        -> String
    {
        let path = self.path
        return try state.withLock { (state: inout State) throws(SpoolError) -> String in
            guard let descriptor = state.descriptor else {
                throw SpoolError(
                    code: .notClaimed, message: "bundle \(name) is not claimed (already moved or released)", path: path)
            }
            guard SpoolFiles.identity(ofPath: path) == identity else {
                throw SpoolError(
                    code: .notClaimed, message: "processing/\(name) is no longer the claimed file (moved by hand?)",
                    path: path)
            }
            let final = try body(descriptor)
            var info = stat()
            if clearsCutShortMoves && fstat(descriptor, &info) == 0 && info.st_nlink > 1 {
                spool.dropNamesOfCutShortMoves(of: name, file: identity, keeping: (folder, final))
            }
            SpoolFiles.unlockAndClose(descriptor)
            state.descriptor = nil
            sessionHold.withLock { $0.take() }?.release()
            return final
        }
    }
}

extension Spool {
    /// Claims a bundle found by ``scan(now:minAge:)``: exactly one of any number of claimers, in any number
    /// of processes, gets it. Returns nil when another claimer won (or the file is gone, or `processing/`
    /// holds a bundle of the same name: it is claimed again once that one has moved on).
    ///
    /// Steps: open `incoming/NAME` (no symlinks), `flock(LOCK_EX|LOCK_NB)` (busy: someone else has it),
    /// check that `incoming/NAME` is still this inode (it may have been claimed, finished and replaced by a
    /// new file of the same name between our open and our lock), rename it to `processing/NAME` without
    /// replacing (ENOENT: someone else was first), and check the inode again there.
    ///
    /// No fsync: if a crash loses the rename, the bundle is back in `incoming/` and is claimed again, and
    /// it resumes from its checkpoints; syncing every claim would only slow claiming.
    ///
    /// A rename that reported an error but happened (as over NFS) is a claim like any other: the file is in
    /// `processing/` and the lock is ours.
    ///
    /// `leased`: the claim is a lease in a shared database, which can run out while this process
    /// lives (``ClaimedBundle/clearsCutShortMoves``).
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func claim(_ entry: SpoolEntry, leased: Bool = false) throws(SpoolError) -> ClaimedBundle? {
        try claim(entry, leased: leased, renameCalls: .system)
    }

    /// Why a move out of `incoming/` is refused for one file and not another: what a person can
    /// change. Only the owner of a file may move it out of a folder with the sticky bit; where a
    /// move is a link and an unlink (NFS: no RENAME_NOREPLACE), the kernel lets a process link
    /// only a file it owns or may write (`fs.protected_hardlinks`).
    private func whyNotMovable(_ error: Int32) -> String {
        guard error == EPERM else { return "" }
        var folder = stat()
        if stat(path(.incoming), &folder) == 0, folder.st_mode & S_ISVTX != 0 {
            return " (incoming/ has the sticky bit, so only a bundle's owner may move it: chmod -t it)"
        }
        return " (on a file system without RENAME_NOREPLACE, such as NFS, a move is a link, and the kernel "
            + "(fs.protected_hardlinks) lets the worker link only a bundle it owns or may write: have producers "
            + "leave bundles writable by the worker's group, mode 0660)"
    }

    /// ``claim(_:)`` with the calls its moves are made of (a test's faults).
    func claim(_ entry: SpoolEntry, leased: Bool = false, renameCalls: SpoolFiles.RenameCalls) throws(SpoolError)
        -> ClaimedBundle?
    {
        let source = path(.incoming, entry.name)
        guard let opened = try Self.openAndLock(source, unreadableAllowed: true) else { return nil }
        let descriptor = opened.descriptor
        // The file must be the one listed, as it was listed: one rewritten in place since (an scp
        // producer) or a new one under the same name is judged again by the next listing and its
        // min-age, not claimed half-written.
        var info = stat()
        guard opened.file == FileIdentity(device: entry.device, inode: entry.inode),
            fstat(descriptor, &info) == 0, spoolDate(info.st_mtim) == entry.modified
        else {
            SpoolFiles.unlockAndClose(descriptor)
            return nil
        }
        let target = path(.processing, entry.name)
        let error = SpoolFiles.renameNoReplace(source, target, of: opened.file, calls: renameCalls)
        guard error == 0 else {
            SpoolFiles.unlockAndClose(descriptor)
            if error == ENOENT || error == EEXIST { return nil }
            throw SpoolError(
                code: .claimFailed, message: "cannot move bundle into processing/" + whyNotMovable(error),
                path: source, errno: error)
        }
        guard SpoolFiles.identity(ofPath: target) == opened.file else {
            // Someone swapped the file between our check and the rename: what we moved is not locked by us
            // and stays in processing/ as an orphan for the next run; nothing is lost.
            SpoolFiles.unlockAndClose(descriptor)
            return nil
        }
        return ClaimedBundle(
            spool: self, name: entry.name, descriptor: descriptor, identity: opened.file, size: opened.size,
            modified: entry.modified, isOrphan: false, clearsCutShortMoves: opened.locked && !leased,
            renameCalls: renameCalls)
    }

    /// Takes back a bundle in `processing/` whose claimer died: its lock is free. Returns nil when it is
    /// held (a live run is working on it) or gone. Safe against the owner moving it at the same moment:
    /// after locking, `processing/NAME` must still be the inode we locked.
    ///
    /// `lockRequired: false` is for claims held as leases in a shared database: the lease was
    /// taken already, and a lock still held on this host belongs to a worker whose lease ran out
    /// (a paused process), which sends and moves nothing more. The lock is taken if free.
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func claimOrphan(_ entry: SpoolEntry, lockRequired: Bool = true, leased: Bool = false) throws(SpoolError)
        -> ClaimedBundle?
    {
        try claimOrphan(entry, lockRequired: lockRequired, leased: leased, renameCalls: .system)
    }

    /// ``claimOrphan(_:lockRequired:leased:)`` with the calls its moves are made of (a test's faults).
    func claimOrphan(
        _ entry: SpoolEntry, lockRequired: Bool = true, leased: Bool = false, renameCalls: SpoolFiles.RenameCalls
    ) throws(SpoolError) -> ClaimedBundle? {
        let source = path(.processing, entry.name)
        let opened: Opened?
        do {
            opened = try Self.openAndLock(source, lockRequired: lockRequired)
        } catch let error where error.code == .claimFailed && (error.errno == EACCES || error.errno == EPERM) {
            throw Self.unreadableOrphan(source, error)
        }
        guard let opened else { return nil }
        return ClaimedBundle(
            spool: self, name: entry.name, descriptor: opened.descriptor, identity: opened.file, size: opened.size,
            modified: entry.modified, isOrphan: true, clearsCutShortMoves: opened.locked && !leased,
            renameCalls: renameCalls)
    }

    /// An orphan this user may not open (its producer's mode, changed after its claim). It cannot
    /// be locked, so no lock tells whether a live run still has it, and moving it would take it
    /// from one: it waits in `processing/` for a person, and the other bundles go on.
    private static func unreadableOrphan(_ path: String, _ error: SpoolError) -> SpoolError {
        let mode = FileSystem.ownerAndMode(of: path).map { " (\($0))" } ?? ""
        return SpoolError(
            code: .unreadableOrphan,
            message: "a bundle a run left in processing/ cannot be opened: \(FileSystem.userName(geteuid())) may not "
                + "read it\(mode); make it readable to the worker (chmod g+r, or as root `setfacl -m u:dopesync:r` "
                + "where the spool's ACL is not on it: docs/troubleshooting.md), and the next run resumes it",
            path: path, errno: error.errno)
    }

    /// Opens a regular file without following symlinks, takes an exclusive non-blocking flock, and checks
    /// that the path still names the locked inode. Nil when it is gone, replaced, not a regular file, or
    /// locked by someone else. `unreadableAllowed`: a file this user may not read is opened path-only
    /// and not locked (``claim(_:)`` from `incoming/` only, where the no-replace rename into
    /// `processing/` keeps it to one claimer; an orphan's lock is the only sign of its owner).
    private static func openAndLock(_ path: String, lockRequired: Bool = true, unreadableAllowed: Bool = false)
        throws(SpoolError) -> Opened?
    {
        BlockingCalls.check("spool: claiming \(path)")
        // O_NONBLOCK: a FIFO swapped in after the scan must not hang the open. O_CLOEXEC: a child process
        // must not inherit (and keep alive) our lock.
        var descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        var unreadable = false
        if descriptor < 0 && (errno == EACCES || errno == EPERM) && unreadableAllowed {
            // A producer's file this user may not read (its mode, 0600 say): claimed all the same,
            // without a lock (a path-only descriptor takes none; the no-replace renames keep it to
            // one claimer), so that reading it fails it with its reason, in failed/ for a person
            // to see, instead of leaving it in incoming/ for good with a line in a log.
            let refused = errno
            descriptor = dopesync_open_path_only(path)
            unreadable = descriptor >= 0
            // The first open's reason is the one to report, unless the file is gone meanwhile
            // (another run claimed it): a lost race, not a refusal.
            if !unreadable && !Self.goneOrReplaced.contains(errno) { errno = refused }
        }
        guard descriptor >= 0 else {
            let error = errno
            if Self.goneOrReplaced.contains(error) { return nil }
            throw SpoolError(code: .claimFailed, message: "cannot open bundle", path: path, errno: error)
        }
        guard let identity = SpoolFiles.identity(ofDescriptor: descriptor), identity.isRegular else {
            close(descriptor)
            return nil
        }
        var error = unreadable ? 0 : SpoolFiles.tryLock(descriptor, LOCK_EX)
        if error == EBADF {
            // NFS v4 takes a flock as a byte-range lock on the server, and an exclusive one only
            // on a descriptor open for writing. Producers on NFS leave bundles writable by the
            // worker's group already (the link a move makes needs it): the claim locks through
            // such a descriptor, which it never writes.
            guard let writable = try reopenForWriting(path, of: identity.file) else {
                close(descriptor)
                return nil
            }
            close(descriptor)
            descriptor = writable
            error = SpoolFiles.tryLock(descriptor, LOCK_EX)
        }
        let locked = !unreadable && error == 0
        if error == EWOULDBLOCK && !lockRequired { error = 0 }
        guard error == 0 else {
            close(descriptor)
            // ESTALE: over NFS, the file was removed or replaced since the open.
            if error == EWOULDBLOCK || error == ESTALE { return nil }
            throw SpoolError(code: .lockFailed, message: "cannot lock bundle", path: path, errno: error)
        }
        // Between our open and our lock, the owner may have moved the file on (and a new file of the same
        // name may have arrived): the lock is ours only if the path still names the inode we locked.
        guard SpoolFiles.identity(ofPath: path) == identity.file else {
            SpoolFiles.unlockAndClose(descriptor)
            return nil
        }
        return Opened(descriptor: descriptor, file: identity.file, size: identity.size, locked: locked)
    }

    /// `path` opened again for reading and writing, for an exclusive lock over NFS; nil when it no
    /// longer names `file`. A bundle the worker may not write cannot be locked there: it waits
    /// where it is for a person (``SpoolError/Code/notLockable``), and the other bundles go on.
    private static func reopenForWriting(_ path: String, of file: FileIdentity) throws(SpoolError) -> Int32? {
        let descriptor = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            let error = errno
            // Gone or replaced since the first open (a folder put there: EISDIR): the next listing judges it.
            if goneOrReplaced.contains(error) || error == EISDIR { return nil }
            // Anything but a refusal of this file is the machine's (no descriptor left, I/O): not the bundle's mode.
            guard error == EACCES || error == EPERM || error == EROFS else {
                throw SpoolError(code: .claimFailed, message: "cannot open bundle to lock it", path: path, errno: error)
            }
            let mode = FileSystem.ownerAndMode(of: path).map { " (\($0))" } ?? ""
            throw SpoolError(
                code: .notLockable,
                message: "cannot lock the bundle: on NFS a lock that keeps other hosts out needs the bundle open "
                    + "for writing, and \(FileSystem.userName(geteuid())) may not write it\(mode); have producers "
                    + "leave bundles writable by the worker's group, mode 0660",
                path: path, errno: error)
        }
        guard SpoolFiles.identity(ofDescriptor: descriptor)?.file == file else {
            close(descriptor)
            return nil
        }
        return descriptor
    }

    /// A bundle's file as ``openAndLock(_:lockRequired:unreadableAllowed:)`` opened it.
    private struct Opened {
        let descriptor: Int32
        let file: FileIdentity
        let size: Int64
        /// Whether the flock is this claim's (not a path-only claim, nor a lease's takeover of a
        /// lock still held).
        let locked: Bool
    }

    /// What an open or a lock answers for a file removed or replaced since it was listed (or
    /// opened): another run's claim, a producer's new copy. A lost race, for the next listing.
    /// ESTALE: over NFS, a handle to a file the server no longer has.
    private static let goneOrReplaced: Set<Int32> = [ENOENT, ELOOP, ENXIO, ESTALE]
}

extension Spool {
    /// Removes the names a bundle kept in `incoming/`, `done/` or `failed/` from moves out of
    /// `processing/` cut short between their link and their unlink (NFS, then a crash or a pause),
    /// once the bundle has made its own move to `kept`: it is then in one folder, whatever the
    /// earlier move's outcome was. Only after that move, never before: a paused worker that wakes
    /// to finish its own move unlinks its `processing/` name, and the bundle must keep one.
    ///
    /// A name counts only if it is the bundle's own or a suffixed form of it (``suffixedName(_:_:)``)
    /// and holds the same file: a producer's own hard link under another name is left alone. A
    /// failed name goes before its sidecar, so that no failed bundle is ever without its reason.
    func dropNamesOfCutShortMoves(of name: String, file: FileIdentity, keeping kept: (Folder, String)) {
        BlockingCalls.check("spool: removing other names of \(name)")
        let keptPath = path(kept.0, kept.1)
        for folder in [Folder.incoming, .done, .failed] {
            // Names first, from the listing alone: only the few that may be this bundle's are looked at.
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: path(folder)) else { continue }
            for other in names where (folder, other) != kept && Self.isSuffixed(other, formOf: name) {
                let otherPath = path(folder, other)
                // Never the last name: the kept one must still hold the file.
                guard SpoolFiles.identity(ofPath: otherPath) == file, SpoolFiles.identity(ofPath: keptPath) == file,
                    unlink(otherPath) == 0
                else { continue }
                if folder == .failed { unlink(sidecarPath(forFailed: other)) }
            }
        }
    }

    /// Whether `candidate` is `name` or one of its suffixed forms (`a.tar.gz` → `a.1.tar.gz`).
    static func isSuffixed(_ candidate: String, formOf name: String) -> Bool {
        if candidate == name { return true }
        // Each number after a dot may be the suffix: `s.1` has no extension, `a.2.tar.gz` has one.
        let parts = candidate.split(separator: ".", omittingEmptySubsequences: false)
        return parts.dropFirst().contains { part in
            guard let n = Int(part), n > 0, String(n) == part else { return false }
            return suffixedName(name, n) == candidate
        }
    }
}
