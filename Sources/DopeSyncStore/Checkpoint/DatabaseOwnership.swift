import DopeSyncBundle
import DopeSyncSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The checkpoint database says which records exist on the server and under which ids: whoever
/// can replace it can make the worker send a bundle's records into another user's session. So a
/// run uses only files that are its own: the database, its WAL, its shared memory and its lock
/// file must be regular files (never a symlink) owned by the user running dopesync, and are kept
/// at mode 0600. Anything else is refused with what it is, whose it is, and the command that
/// fixes it, never used.
package enum DatabaseOwnership {
    /// The files of the database at `path` (with its lock file at `lockPath`).
    static func files(path: String, lockPath: String) -> [String] {
        [path, path + "-wal", path + "-shm", lockPath]
    }

    /// Checks every file that exists, narrows their modes to 0600, and creates the database file
    /// itself (empty, 0600, not through a symlink) when it does not exist yet, so SQLite, which
    /// gives the WAL and shared-memory files the database's mode, never makes them readable.
    static func secure(path: String, lockPath: String) throws(CheckpointError) {
        for (file, mode) in try check(path: path, lockPath: lockPath) where mode & 0o077 != 0 {
            _ = chmod(file, 0o600)  // ours: narrowing can only help; a failure changes nothing
        }
        if !FileManager.default.fileExists(atPath: path) { try create(path) }
    }

    /// Checks the files that exist, changing nothing; returns each with its mode.
    @discardableResult
    package static func check(path: String, lockPath: String) throws(CheckpointError) -> [(String, mode_t)] {
        let me = geteuid()
        var found: [(String, mode_t)] = []
        for file in files(path: path, lockPath: lockPath) {
            var info = stat()
            guard lstat(file, &info) == 0 else {
                let code = errno
                guard code == ENOENT else {
                    throw CheckpointError(
                        code: .cannotOpen, message: "cannot look at \(file): \(String(cString: strerror(code)))")
                }
                continue
            }
            let mode = info.st_mode & 0o7777
            if info.st_mode & S_IFMT == S_IFLNK {
                throw CheckpointError(
                    code: .notOwned,
                    message: "\(file) is a symbolic link: the checkpoint database is used only as a file of its own "
                        + "(remove the link; dopesync makes a new database, and looks on the server before sending anything twice)"
                )
            }
            guard info.st_mode & S_IFMT == S_IFREG else {
                throw CheckpointError(code: .notOwned, message: "\(file) is not a regular file: refused")
            }
            guard info.st_uid == me else {
                let owner = FileSystem.userName(info.st_uid)
                let fix =
                    me == 0
                    ? "dopesync is running as root: run it as \(owner) (runuser -u \(owner) -- dopesync …); "
                        + "only if root is meant to own this spool, chown root: \(path)*"
                    : "if it is this spool's own database (a run as another user, root say, made it), give it back: "
                        + "chown \(FileSystem.userName(me)): \(path)*; and run dopesync as \(FileSystem.userName(me)) only"
                throw CheckpointError(
                    code: .notOwned,
                    message:
                        "\(file) belongs to \(owner) (mode \(FileSystem.octal(mode))), not to \(FileSystem.userName(me)), who runs "
                        + "dopesync: it is refused, never used. \(fix)")
            }
            found.append((file, mode))
        }
        return found
    }

    private static func create(_ path: String) throws(CheckpointError) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if descriptor >= 0 {
            close(descriptor)
            return
        }
        let code = errno
        if code == EEXIST { return }  // another run made it meanwhile: SQLite's open takes it from here
        throw CheckpointError(
            code: .cannotOpen,
            message: "cannot create the checkpoint database \(path): \(String(cString: strerror(code))) "
                + "(does its folder exist, and may \(FileSystem.userName(geteuid())) write there?)")
    }

    /// `path` with its folder's symlinks resolved (`realpath`), its last component as it is: the
    /// folder may be a link, the file may not. Unchanged when the folder cannot be resolved.
    static func resolvingFolder(of path: String) -> String {
        let folder = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        guard let resolved = realpath(folder.isEmpty ? "." : folder, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved) + "/" + name
    }
}
