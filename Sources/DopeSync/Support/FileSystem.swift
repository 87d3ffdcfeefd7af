import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An error from the file system, naming the file and the operation.
public struct FileSystemError: Error, Sendable, CustomStringConvertible {
    public var path: String
    public var operation: String
    public var errno: Int32

    public init(path: String, operation: String, errno: Int32) {
        self.path = path
        self.operation = operation
        self.errno = errno
    }

    public var description: String {
        "\(path): cannot \(operation): \(String(cString: strerror(errno)))"
    }
}

enum FileSystem {
    /// Reads a whole file, refusing one larger than `maxBytes`.
    static func readFile(_ path: String, maxBytes: Int) throws -> [UInt8] {
        var bytes: [UInt8] = []
        try withChunks(of: path) { chunk in
            if bytes.count + chunk.count > maxBytes {
                throw FileSystemError(path: path, operation: "read more than \(maxBytes) bytes", errno: EFBIG)
            }
            bytes.append(contentsOf: chunk)
        }
        return bytes
    }

    /// Hands the file's bytes to `body` in bounded chunks.
    static func withChunks(
        of path: String,
        chunkSize: Int = 256 * 1024,
        _ body: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw FileSystemError(path: path, operation: "open", errno: errno) }
        defer { close(descriptor) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = read(descriptor, buffer.baseAddress, chunkSize)
            if count < 0 {
                if errno == EINTR { continue }
                throw FileSystemError(path: path, operation: "read", errno: errno)
            }
            if count == 0 { return }
            try body(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        }
    }

    /// Whether `path` names a regular file (links are not followed).
    /// The size of the file at `path` in bytes, nil when it cannot be read.
    static func size(ofPath path: String) -> Int64? {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : nil
    }

    static func isRegularFile(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
    }

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
    static func writeAtomically(
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
    static var processUmask: mode_t {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }),
            let mask = mode_t(line.dropFirst("Umask:".count).trimmingCharacters(in: .whitespaces), radix: 8)
        else { return 0o022 }
        return mask
    }

    /// Writes all of `bytes` to an open file, retrying short writes and EINTR.
    static func writeAll(_ bytes: [UInt8], to descriptor: Int32, path: String) throws(FileSystemError) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { buffer in
                write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
            }
            if written < 0 {
                if errno == EINTR { continue }
                throw FileSystemError(path: path, operation: "write", errno: errno)
            }
            offset += written
        }
    }

    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
