import CSystemCalls
import DopeSyncBundle
import DopeSyncSupport
import Foundation
import ThreadRules

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The file-system calls the spool's moves are made of.
package enum SpoolFiles {
    /// The system calls a no-replace rename is made of, each returning 0 or an errno. A value, so
    /// a test can make one of them fail the way a file system does (root, which tests run as,
    /// cannot be refused an unlink by permissions), or report an error for what it did, as over NFS
    /// (``with(_:on:at:)``).
    struct RenameCalls: Sendable {
        /// `renameat2(RENAME_NOREPLACE)`; ENOSYS where the kernel lacks it.
        var renameNoReplace: @Sendable (String, String) -> Int32
        var link: @Sendable (String, String) -> Int32
        var unlink: @Sendable (String) -> Int32

        static let system = RenameCalls(
            renameNoReplace: { source, target in SpoolFiles.systemRenameNoReplace(source, target) },
            link: { source, target in SpoolFiles.systemLink(source, target) },
            unlink: { path in SpoolFiles.systemUnlink(path) }
        )
    }

    // Constants of <sys/stat.h> that Swift does not import (macros).
    /// `UTIME_OMIT`: utimensat leaves this time as it is.
    static let utimeOmit = (1 << 30) - 2
    /// `UTIME_NOW`: utimensat sets this time to now.
    static let utimeNow = (1 << 30) - 1

    private static func systemRenameNoReplace(_ source: String, _ target: String) -> Int32 {
        dopesync_rename_no_replace(source, target) == 0 ? 0 : errno
    }

    private static func systemLink(_ source: String, _ target: String) -> Int32 {
        link(source, target) == 0 ? 0 : errno
    }

    private static func systemUnlink(_ path: String) -> Int32 {
        unlink(path) == 0 ? 0 : errno
    }

    /// `rename` that fails with EEXIST instead of replacing an existing target. Returns 0 when `target`
    /// names the file and `source` no longer does; else an errno, and the file is still at `source`
    /// (EEXIST: another file holds `target`), unless someone else moved it away meanwhile.
    ///
    /// Linux's `renameat2(RENAME_NOREPLACE)` is atomic; glibc has it since 2.28 but Swift's Glibc module
    /// does not declare it, so `CSystemCalls` calls it. Where the file system refuses it (EINVAL: NFS,
    /// some overlay mounts) or the kernel lacks it (ENOSYS), `link` + `unlink` does the same job: `link`
    /// fails with EEXIST atomically, so two processes still cannot both take one name. A crash between the
    /// two leaves the bundle under both names (one inode), never under none; the next move of it finishes
    /// the job. When the `unlink` fails, the new name is removed again, so the bundle stays in exactly one
    /// folder, the one it was in.
    ///
    /// A call that reports an error may have happened all the same: an NFS client that sends a request
    /// again, its first answer lost, reports the second answer (EEXIST for a link, ENOENT for a rename or
    /// an unlink, EIO or ESTALE when the server restarted). So every error is judged by looking at what
    /// the two names hold: the target naming the file means the move happened.
    ///
    /// - Parameter file: the file to move, as it was claimed; nil: whatever `source` names now.
    static func renameNoReplace(
        _ source: String, _ target: String, of file: FileIdentity? = nil, calls: RenameCalls = .system
    ) -> Int32 {
        BlockingCalls.check("spool: moving \(source)")
        guard let file = file ?? identity(ofPath: source) else { return ENOENT }
        return renameNoReplace(MoveSource(path: source, calls: calls), target, file: file, calls: calls)
    }

    /// The name a move takes a file from: a path, or the bytes of a name that is not UTF-8 (which
    /// no `String` holds). The calls on it, each returning 0 or an errno, as ``RenameCalls``'.
    struct MoveSource {
        let renameNoReplace: (String) -> Int32
        let link: (String) -> Int32
        let unlink: () -> Int32
        /// The file the name holds now (nil: none).
        let identity: () -> FileIdentity?

        init(path: String, calls: RenameCalls) {
            renameNoReplace = { calls.renameNoReplace(path, $0) }
            link = { calls.link(path, $0) }
            unlink = { calls.unlink(path) }
            identity = { SpoolFiles.identity(ofPath: path) }
        }

        /// `bytes`: the path, NUL-terminated.
        init(bytes: [CChar]) {
            func call(_ body: (UnsafePointer<CChar>) -> Int32) -> Int32 {
                bytes.withUnsafeBufferPointer { body($0.baseAddress!) }
            }
            renameNoReplace = { target in call { dopesync_rename_no_replace($0, target) == 0 ? 0 : errno } }
            link = { target in call { Glibc.link($0, target) == 0 ? 0 : errno } }
            unlink = { call { Glibc.unlink($0) == 0 ? 0 : errno } }
            identity = { bytes.withUnsafeBufferPointer { SpoolFiles.identity(ofPath: $0.baseAddress!) } }
        }
    }

    /// The move itself, whichever way the source is named; `calls` for the target's unlink.
    private static func renameNoReplace(_ source: MoveSource, _ target: String, file: FileIdentity, calls: RenameCalls)
        -> Int32
    {
        let error = source.renameNoReplace(target)
        if error == 0 { return 0 }
        if error == EINVAL || error == ENOSYS { return linkThenUnlink(source, target, file: file, calls: calls) }
        // Not moved while the target does not name the file: EEXIST then means another file holds it.
        guard identity(ofPath: target) == file else { return error }
        // Moved. Both names holding it is a link + unlink cut short by an earlier crash: finish that.
        return source.identity() == file
            ? removeSourceName(source, target, file: file, undoingTheLink: false, calls: calls) : 0
    }

    /// The no-replace rename for file systems without one: `link`, then `unlink` of the source's name.
    private static func linkThenUnlink(_ source: MoveSource, _ target: String, file: FileIdentity, calls: RenameCalls)
        -> Int32
    {
        let error = source.link(target)
        // EEXIST may answer a link sent again whose first copy made the name: then the name is our file,
        // and taking the next suffixed name would leave the bundle under two names.
        if error != 0 && identity(ofPath: target) != file { return error }
        return removeSourceName(source, target, file: file, undoingTheLink: error == 0, calls: calls)
    }

    /// Both names hold the file: removes the source's, which completes the move. If that cannot be
    /// done and `undoingTheLink` (this call made the target's name), removes the target's, so the
    /// file stays where it was under one name, and returns the error. A target name this call did
    /// not make (an earlier move's, cut short; or a link sent again over NFS, which cannot be told
    /// from it) is left: a paused worker that made it may still unlink the source's name, and the
    /// file must keep one. Both names then stay until the bundle's next move.
    private static func removeSourceName(
        _ source: MoveSource, _ target: String, file: FileIdentity, undoingTheLink: Bool, calls: RenameCalls
    ) -> Int32 {
        let error = source.unlink()
        // ENOENT may answer an unlink sent again whose first copy removed the name: look. A source that
        // cannot be looked at counts as gone, since undoing the link of a file no longer there would lose it.
        if error == 0 || source.identity() != file { return 0 }
        // Should this fail too, both names are one inode: the next claim of it (by lock and inode) takes
        // it back, and its next move finishes this one.
        if undoingTheLink { _ = calls.unlink(target) }
        return error
    }

    /// Renames `source` into `folder` under `name` or, when taken, the first free suffixed name.
    /// Returns the name used. Never replaces a file. `file` and `calls` as for ``renameNoReplace(_:_:of:calls:)``:
    /// a move that reported an error but happened returns its name.
    static func moveNoReplace(
        _ source: String, toFolder folder: String, name: String, of file: FileIdentity? = nil,
        calls: RenameCalls = .system
    ) throws(SpoolError) -> String {
        BlockingCalls.check("spool: moving \(source)")
        guard let file = file ?? identity(ofPath: source) else {
            throw SpoolError(
                code: .moveFailed, message: "cannot move bundle to \(folder)/\(name)", path: source, errno: ENOENT)
        }
        return try moveNoReplace(
            MoveSource(path: source, calls: calls), shown: source, toFolder: folder, name: name, file: file,
            calls: calls)
    }

    /// ``moveNoReplace(_:toFolder:name:of:calls:)`` of a source given as bytes, NUL-terminated (a
    /// name that is not UTF-8, which no `String` holds), shown in errors as `shown`.
    static func moveNoReplace(bytes source: [CChar], shown: String, toFolder folder: String, name: String)
        throws(SpoolError) -> String
    {
        BlockingCalls.check("spool: renaming a name that is not UTF-8 to \(folder)/\(name)")
        let named = MoveSource(bytes: source)
        guard let file = named.identity() else {
            throw SpoolError(
                code: .moveFailed, message: "cannot move bundle to \(folder)/\(name)", path: shown, errno: ENOENT)
        }
        return try moveNoReplace(named, shown: shown, toFolder: folder, name: name, file: file, calls: .system)
    }

    /// The move under `name` or the first free suffixed name, whichever way the source is named.
    private static func moveNoReplace(
        _ source: MoveSource, shown: String, toFolder folder: String, name: String, file: FileIdentity,
        calls: RenameCalls
    ) throws(SpoolError) -> String {
        for n in 0..<100_000 {
            let candidate = Spool.suffixedName(name, n)
            let error = renameNoReplace(source, folder + "/" + candidate, file: file, calls: calls)
            if error == 0 { return candidate }
            guard error == EEXIST else {
                throw SpoolError(
                    code: .moveFailed, message: "cannot move bundle to \(folder)/\(candidate)", path: shown,
                    errno: error)
            }
        }
        throw SpoolError(code: .moveFailed, message: "no free name for \(name)", path: folder)
    }

    /// Syncs both folders of a rename that has happened. Best effort: a failure here cannot undo the
    /// rename, and reporting the move as failed would make the caller act on a bundle that has moved.
    static func syncDirectoriesAfterMove(_ target: String, _ source: String) {
        try? FileSystem.syncDirectory(target)
        try? FileSystem.syncDirectory(source)
    }

    /// `flock(operation | LOCK_NB)`, tried again when a signal interrupts it: 0, or the errno
    /// (EWOULDBLOCK: another descriptor holds a lock that excludes this one).
    static func tryLock(_ descriptor: Int32, _ operation: Int32) -> Int32 {
        while flock(descriptor, operation | LOCK_NB) != 0 {
            guard errno == EINTR else { return errno }
        }
        return 0
    }

    /// Ends a lock taken on `descriptor`, then closes it. The unlock comes first: a child process
    /// forked at this moment elsewhere in the worker shares the descriptor's open file until its
    /// `exec`, and a close alone would leave the lock held that long. Unlocking a descriptor that
    /// holds no lock does nothing.
    static func unlockAndClose(_ descriptor: Int32) {
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }

    /// The file a path names now, without following a symlink; nil if it names nothing (or cannot be looked at).
    static func identity(ofPath path: String) -> FileIdentity? {
        path.withCString { identity(ofPath: $0) }
    }

    /// ``identity(ofPath:)`` of a path given as C bytes (a name that is not UTF-8).
    static func identity(ofPath path: UnsafePointer<CChar>) -> FileIdentity? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    static func identity(ofDescriptor descriptor: Int32) -> (file: FileIdentity, size: Int64, isRegular: Bool)? {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return nil }
        return (
            FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino)), Int64(info.st_size),
            info.st_mode & S_IFMT == S_IFREG
        )
    }

    /// Writes `text` to `path` (a new file) and syncs it.
    static func writeSynced(_ text: String, to path: String) -> Int32 {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { return errno }
        var failure: Int32 = 0
        do {
            try FileSystem.writeAll(Array(text.utf8), to: descriptor, path: path)
        } catch {
            failure = error.errno
        }
        if failure == 0 && fsync(descriptor) != 0 { failure = errno }
        if close(descriptor) != 0 && failure == 0 { failure = errno }
        if failure != 0 { unlink(path) }
        return failure
    }
}
