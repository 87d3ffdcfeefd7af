import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The file-system calls the spool's moves are made of.
enum SpoolFiles {
    /// The system calls a no-replace rename is made of, each returning 0 or an errno. A value, so
    /// a test can make one of them fail the way a file system does (root, which tests run as,
    /// cannot be refused an unlink by permissions).
    struct RenameCalls: Sendable {
        /// `renameat2(RENAME_NOREPLACE)`; ENOSYS where the C library lacks it.
        var renameNoReplace: @Sendable (String, String) -> Int32
        var link: @Sendable (String, String) -> Int32
        var unlink: @Sendable (String) -> Int32

        static let system = RenameCalls(
            renameNoReplace: { source, target in SpoolFiles.systemRenameNoReplace(source, target) },
            link: { source, target in SpoolFiles.systemLink(source, target) },
            unlink: { path in SpoolFiles.systemUnlink(path) }
        )
    }

    // Constants of <linux/fs.h> and <sys/stat.h> that Swift does not import (macros, or not in glibc's headers).
    /// `RENAME_NOREPLACE`: renameat2 fails with EEXIST rather than replace the target.
    private static let renameNoReplace: UInt32 = 1
    /// `UTIME_OMIT`: utimensat leaves this time as it is.
    static let utimeOmit = (1 << 30) - 2
    /// `UTIME_NOW`: utimensat sets this time to now.
    static let utimeNow = (1 << 30) - 1

    private static func systemRenameNoReplace(_ source: String, _ target: String) -> Int32 {
        guard let renameat2 = renameat2Function else { return ENOSYS }
        return renameat2(AT_FDCWD, source, AT_FDCWD, target, renameNoReplace) == 0 ? 0 : errno
    }

    private static func systemLink(_ source: String, _ target: String) -> Int32 {
        link(source, target) == 0 ? 0 : errno
    }

    private static func systemUnlink(_ path: String) -> Int32 {
        unlink(path) == 0 ? 0 : errno
    }

    /// `rename` that fails with EEXIST instead of replacing an existing target. Returns 0 or an errno.
    ///
    /// Linux's `renameat2(RENAME_NOREPLACE)` is atomic; glibc has it since 2.28 but Swift's Glibc module
    /// does not export it, so it is looked up with `dlsym`. Where the file system refuses it (EINVAL: NFS,
    /// some overlay mounts) or the kernel lacks it (ENOSYS), `link` + `unlink` does the same job: `link`
    /// fails with EEXIST atomically, so two processes still cannot both take one name. A crash between the
    /// two leaves the bundle under both names (one inode), never under none. When the `unlink` fails, the
    /// new name is removed again, so the bundle stays in exactly one folder, the one it was in.
    static func renameNoReplace(_ source: String, _ target: String, calls: RenameCalls = .system) -> Int32 {
        let error = calls.renameNoReplace(source, target)
        guard error == EINVAL || error == ENOSYS else { return error }
        let linkError = calls.link(source, target)
        if linkError != 0 { return linkError }
        let unlinkError = calls.unlink(source)
        if unlinkError != 0 {
            // Undo the link: the bundle stays where it was, under one name. Should this fail too,
            // both names are one inode, and the next run's claim (by lock and inode) sees that.
            _ = calls.unlink(target)
            return unlinkError
        }
        return 0
    }

    private typealias Renameat2 =
        @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
    private static let renameat2Function: Renameat2? = {
        guard let symbol = dlsym(nil, "renameat2") else { return nil }
        return unsafeBitCast(symbol, to: Renameat2.self)
    }()

    /// Renames `source` into `folder` under `name` or, when taken, the first free suffixed name.
    /// Returns the name used. Never replaces a file.
    static func moveNoReplace(_ source: String, toFolder folder: String, name: String) throws(SpoolError) -> String {
        for n in 0..<100_000 {
            let candidate = Spool.suffixedName(name, n)
            let error = renameNoReplace(source, folder + "/" + candidate)
            if error == 0 { return candidate }
            guard error == EEXIST else {
                throw SpoolError(
                    code: .moveFailed, message: "cannot move bundle to \(folder)/\(candidate)", path: source,
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

    /// The file a path names now, without following a symlink; nil if it names nothing (or cannot be looked at).
    static func identity(ofPath path: String) -> FileIdentity? {
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
