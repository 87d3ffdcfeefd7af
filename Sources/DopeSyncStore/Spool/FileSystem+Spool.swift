import DopeSyncSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The file writes that follow the spool's rules: folders synced after a move, and a name never
/// replaced but suffixed (``SpoolFiles/moveNoReplace(_:toFolder:name:)``).
extension FileSystem {
    /// Makes a folder's entries durable: after `rename` returns, the new entry may still exist only
    /// in memory, and a power loss could bring back the old one.
    static func syncDirectory(_ path: String) throws(SpoolError) {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw SpoolError(code: .moveFailed, message: "cannot open folder to sync it", path: path, errno: errno)
        }
        defer { close(descriptor) }
        // EINVAL: a file system that cannot sync folders (some network mounts); nothing more can be done.
        if fsync(descriptor) != 0 && errno != EINVAL {
            throw SpoolError(code: .moveFailed, message: "cannot sync folder", path: path, errno: errno)
        }
    }

    /// Writes a file atomically: into a dot-named temporary file in `temporaryDirectory`
    /// (same file system as the target), fsynced, then renamed to `target`. A reader of the
    /// target's folder never sees a half-written file. With `replace: false` an existing name
    /// is never replaced: the spool's suffix rule applies (`s.tar.gz` → `s.1.tar.gz`) and the
    /// final path is returned. The file gets `mode` (mkstemp makes it 0600 first).
    @discardableResult
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    package static func writeAtomically(
        to target: String,
        temporaryDirectory: String,
        replace: Bool,
        mode: mode_t = 0o644,
        _ write: (_ fileDescriptor: Int32) throws -> Void
    ) throws -> String {
        let name = target.split(separator: "/").last.map(String.init) ?? target
        var template = Array("\(temporaryDirectory)/.\(name).XXXXXX".utf8CString)
        let descriptor = mkstemp(&template)
        let temporary = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        guard descriptor >= 0 else { throw FileSystemError(path: temporary, operation: "create", errno: errno) }
        var committed = false
        defer {
            close(descriptor)
            if !committed { unlink(temporary) }
        }
        fchmod(descriptor, mode)
        try write(descriptor)
        guard fsync(descriptor) == 0 else { throw FileSystemError(path: temporary, operation: "fsync", errno: errno) }

        let final: String
        if replace {
            guard rename(temporary, target) == 0 else {
                throw FileSystemError(path: target, operation: "rename into place", errno: errno)
            }
            final = target
        } else {
            let folder = directory(of: target)
            final = folder + "/" + (try SpoolFiles.moveNoReplace(temporary, toFolder: folder, name: name))
        }
        committed = true
        // Best effort, as after a move (SpoolFiles.syncDirectoriesAfterMove): the file is in place
        // and complete; failing now would make the caller act as if it were not.
        try? syncDirectory(directory(of: final))
        return final
    }

    /// The process's file mode creation mask, read without changing it (`Umask:` in
    /// /proc/self/status; `umask(2)` can only be read by setting it, which would race other
    /// threads). 022 where it cannot be read.
    package static var processUmask: mode_t {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }),
            let mask = mode_t(line.dropFirst("Umask:".count).trimmingCharacters(in: .whitespaces), radix: 8)
        else { return 0o022 }
        return mask
    }
}
