import DopeSyncSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Opening a bundle's file for reading, as the claim requires. A file of its own, without
/// libarchive's module: `struct stat` used next to `CArchive` makes a release build (whole-module)
/// attribute it to that module, and every other use of it in the target fails to compile.
enum ClaimedFile {
    /// Opens `path` for reading without waiting on a FIFO (O_NONBLOCK) and checks that it is a
    /// regular file. With `expected` (a claimed bundle) it also follows no symlink (O_NOFOLLOW) and
    /// checks that it is the very file (device and inode) that was claimed: whatever was put at a
    /// claimed path since is never read. (Without, a person's `inspect` of a symlink is read.)
    /// Returns the descriptor, in blocking mode again.
    static func openRegularFile(_ path: String, expected: FileIdentity?) throws(BundleError) -> Int32 {
        let noFollow = expected == nil ? 0 : O_NOFOLLOW
        let descriptor = open(path, O_RDONLY | noFollow | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            let code = errno
            if code == ELOOP && expected != nil {
                throw BundleError(
                    .replacedAfterClaim, culprit: path,
                    message: "is now a symbolic link, not the file that was claimed: it is not followed")
            }
            if code == EACCES || code == EPERM, let ownerAndMode = FileSystem.ownerAndMode(of: path) {
                let user = FileSystem.userName(geteuid())
                throw BundleError(
                    .io, culprit: path,
                    message:
                        "cannot open: \(String(cString: strerror(code))): \(user) may not read it (\(ownerAndMode)); "
                        + "its producer must leave it readable (mode 0640, or the spool's default ACL), then "
                        + "`dopesync requeue` it", systemErrno: code)
            }
            throw BundleError(
                code == ENOENT ? .notAnArchive : .io, culprit: path,
                message: "cannot open: \(String(cString: strerror(code)))", systemErrno: code)
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let code = errno
            close(descriptor)
            throw BundleError(
                .io, culprit: path, message: "cannot stat: \(String(cString: strerror(code)))", systemErrno: code)
        }
        let identity = FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        if let expected, identity != expected {
            close(descriptor)
            throw BundleError(
                .replacedAfterClaim, culprit: path,
                message: "is no longer the file that was claimed (something else was put in its place): it is not read")
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            close(descriptor)
            throw BundleError(.notAnArchive, culprit: path, message: "is not a regular file")
        }
        // A regular file's reads never wait anyway; blocking mode is what libarchive's callbacks expect.
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
        return descriptor
    }
}
