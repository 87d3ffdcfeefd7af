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

package enum FileSystem {
    /// The longest file name Linux file systems take (NAME_MAX), in bytes: a bundle's image
    /// names are held to it, and the spool cuts the names it makes to it.
    package static let maxNameBytes = 255

    /// Reads a whole file, refusing one larger than `maxBytes`.
    package static func readFile(_ path: String, maxBytes: Int) throws -> [UInt8] {
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
    package static func withChunks(
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
    package static func size(ofPath path: String) -> Int64? {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : nil
    }

    package static func isRegularFile(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
    }

    /// Writes all of `bytes` to an open file, retrying short writes and EINTR.
    package static func writeAll(_ bytes: [UInt8], to descriptor: Int32, path: String) throws(FileSystemError) {
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

    package static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// A user's name, for a message: `uid 1234` when it has none.
    ///
    /// `getpwuid_r`, not `getpwuid`: claims run on several threads at once, and `getpwuid`'s
    /// answer lives in one static buffer that another thread's lookup overwrites.
    package static func userName(_ uid: uid_t) -> String {
        var size = 1024
        // ERANGE: the entry does not fit (long GECOS fields): again with a larger buffer, to 1 MiB.
        while size <= 1 << 20 {
            var tooSmall = false
            let name = withUnsafeTemporaryAllocation(of: CChar.self, capacity: size) { buffer -> String? in
                var entry = passwd()
                var found: UnsafeMutablePointer<passwd>? = nil
                return withUnsafeMutablePointer(to: &entry) { entry in
                    let status = getpwuid_r(uid, entry, buffer.baseAddress!, size, &found)
                    tooSmall = status == ERANGE
                    guard status == 0, found != nil, let name = entry.pointee.pw_name else { return nil }
                    return String(cString: name)
                }
            }
            if let name { return name }
            guard tooSmall else { break }
            size *= 4
        }
        return "uid \(uid)"
    }

    /// A file mode as `ls` and `chmod` read it: `0640`.
    package static func octal(_ mode: mode_t) -> String {
        "0" + String(mode, radix: 8)
    }

    /// `owner NAME, mode 0640` of the file at `path` (not followed), for a message about what
    /// this user may do with it; nil when it cannot be looked at.
    package static func ownerAndMode(of path: String) -> String? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return "owner \(userName(info.st_uid)), mode \(octal(info.st_mode & 0o7777))"
    }

    /// Why this process's user cannot write into the folder `path`, whose `access(W_OK | X_OK)`
    /// failed with `error`, and the fix that fits that cause: a read-only file system (a
    /// read-only mount, or a path outside a systemd unit's `ReadWritePaths=`, which
    /// `ProtectSystem=strict` makes read-only for it), a folder the user owns without write
    /// permission, or one that belongs to another user. `otherOwnerFix` is what to say in the
    /// last case (`chown`, or an ACL where the folder is another package's).
    package static func whyNotWritable(_ path: String, error: Int32, otherOwnerFix: (_ user: String) -> String)
        -> String
    {
        let me = userName(geteuid())
        if error == EROFS {
            return "\(path) is on a file system that is read-only for \(me) (\(String(cString: strerror(error)))): "
                + "a read-only mount, or, under systemd, a path outside the unit's ReadWritePaths= "
                + "(add it with systemctl edit dopesync.service: [Service] ReadWritePaths=\(path))"
        }
        var info = stat()
        guard stat(path, &info) == 0 else {
            return "\(path) is not writable by \(me): \(String(cString: strerror(error)))"
        }
        let owner = userName(info.st_uid)
        let mode = octal(info.st_mode & 0o7777)
        if info.st_uid == geteuid() {
            // A folder is written through its entries (w) and reached through them (x); a file, w.
            let (needed, fix): (mode_t, String) = info.st_mode & S_IFMT == S_IFDIR ? (0o300, "u+wx") : (0o200, "u+w")
            return info.st_mode & needed != needed
                ? "\(path) belongs to \(me) but its mode \(mode) does not let its owner write: chmod \(fix) \(path)"
                : "\(path) belongs to \(me) (mode \(mode)), yet writing is refused "
                    + "(\(String(cString: strerror(error)))): an ACL, a file attribute (lsattr) or a security policy"
        }
        return "\(path) is not writable by \(me): it belongs to \(owner) (mode \(mode)); \(otherOwnerFix(me))"
    }
}
