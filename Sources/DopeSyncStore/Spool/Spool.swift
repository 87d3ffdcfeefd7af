import DopeSyncBundle
import DopeSyncSupport
import Foundation
import ThreadRules

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The spool folder and its five subfolders (docs/spool.md):
///
/// ```
/// tmp/         producers write partial files here; never read by the worker
/// incoming/    finished bundles, new and waiting for retry (its next attempt in the checkpoint store)
/// processing/  bundles claimed by a running worker (each held by an flock while it is worked on)
/// done/        bundles whose every step is on the server
/// failed/      bundles that need a person: NAME beside NAME.error
/// ```
///
/// Promises: a bundle is only ever renamed between folders, never deleted, copied or overwritten; a name
/// already taken in the target folder gets a suffix (see ``Spool/suffixedName(_:_:)``).
public struct Spool: Sendable, Hashable {
    public enum Folder: String, Sendable, CaseIterable {
        case tmp, incoming, processing, done, failed
    }

    /// The spool's root folder.
    public let root: String

    public init(root: String) {
        // Keep "/" as is; drop a trailing slash elsewhere so joined paths read cleanly in logs.
        var root = root
        while root.count > 1 && root.hasSuffix("/") { root.removeLast() }
        self.root = root
    }

    /// The path of one of the five folders.
    public func path(_ folder: Folder) -> String { root + "/" + folder.rawValue }

    /// The path of `name` in `folder`.
    public func path(_ folder: Folder, _ name: String) -> String { path(folder) + "/" + name }

    /// The checkpoint database's default path: `SPOOL/dopesync.sqlite`.
    public var databasePath: String { root + "/dopesync.sqlite" }

    /// The write-lock file beside the database: `SPOOL/dopesync.sqlite.lock`.
    public var databaseLockPath: String { databasePath + ".lock" }

    /// What must hold before a command writes to the spool: it exists (unless `mayCreate`), and
    /// root does not write into a spool another user owns (unless `allowRoot`): the database, the
    /// sidecars and the metrics it made would be root's, and the service's own user could not use
    /// them (every later run would exit 73).
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func checkBeforeWriting(mayCreate: Bool, allowRoot: Bool) throws(SpoolError) {
        var info = stat()
        guard stat(root, &info) == 0 else {
            let code = errno
            if code == ENOENT && mayCreate { return }
            throw SpoolError(
                code: .cannotCreate,
                message: code == ENOENT
                    ? "the spool does not exist (a typo?); create it, or give --create-spool to make it here"
                    : "cannot look at the spool",
                path: root, errno: code == ENOENT ? nil : code)
        }
        if geteuid() == 0 && info.st_uid != 0 && !allowRoot {
            let owner = FileSystem.userName(info.st_uid)
            throw SpoolError(
                code: .runningAsRoot,
                message: "running as root on a spool that belongs to \(owner): what root writes there, \(owner) "
                    + "could not use afterwards. Run it as that user: runuser -u \(owner) -- dopesync … "
                    + "(or give --allow-root if root is meant to own it)",
                path: root)
        }
    }

    /// Creates the root and the five folders when missing and checks that each is writable.
    /// Any failure is ``SpoolError/Code/cannotCreate`` or ``SpoolError/Code/notWritable`` (exit 73).
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func create() throws(SpoolError) {
        try Self.makeDirectory(root, intermediate: true)
        for folder in Folder.allCases {
            try Self.makeDirectory(path(folder), intermediate: false)
            if access(path(folder), W_OK | X_OK) != 0 {
                let code = errno
                throw SpoolError(
                    code: .notWritable, message: Self.notWritableMessage(path(folder), error: code), path: path(folder),
                    errno: code)
            }
        }
    }

    /// "spool folder /var/spool/dopesync/done is not writable by dopesync: it belongs to root
    /// (mode 0755); …": what a person needs to put it right, by the cause
    /// (``FileSystem/whyNotWritable(_:error:otherOwnerFix:)``). `kind`: "file" for one of the
    /// spool's own files.
    package static func notWritableMessage(_ folder: String, error: Int32, kind: String = "folder") -> String {
        "spool \(kind) "
            + FileSystem.whyNotWritable(folder, error: error) { me in
                "if \(me) runs the worker, fix it with chown \(me) \(folder), or run dopesync as the user the "
                    + "spool belongs to"
            }
    }

    private static func makeDirectory(_ path: String, intermediate: Bool) throws(SpoolError) {
        var info = stat()
        if stat(path, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFDIR else {
                throw SpoolError(code: .cannotCreate, message: "spool path exists and is not a folder", path: path)
            }
            return
        }
        if intermediate {
            let parent = (path as NSString).deletingLastPathComponent
            if !parent.isEmpty && parent != path { try makeDirectory(parent, intermediate: true) }
        }
        // The umask decides, as for mkdir(1): 0022 gives 0755, the unit's UMask=0077 gives 0700
        // (the package's tmpfiles make the spool with the producers' modes, not this). EEXIST: another process created it
        // between our stat and mkdir, which is fine.
        if mkdir(path, 0o777) != 0 && errno != EEXIST {
            throw SpoolError(code: .cannotCreate, message: "cannot create spool folder", path: path, errno: errno)
        }
    }

    /// The name a bundle gets in a folder where `name` is taken: the `n`-th suffix goes before the
    /// archive extension so the name stays readable and openable by type (`s.tar.gz` → `s.1.tar.gz`,
    /// `s.zip` → `s.2.zip`, `s` → `s.1`). `n == 0` is the name itself. A name that would pass the
    /// file system's 255 bytes loses the end of its base instead: a name the folder cannot take
    /// would keep its bundle in `processing/` for good.
    public static func suffixedName(_ name: String, _ n: Int) -> String {
        n > 0 ? fittedName(name, suffix: ".\(n)") : name
    }

    /// `name` with `suffix` before its archive extension, the end of its base cut off where the
    /// whole would pass 255 bytes.
    static func fittedName(_ name: String, suffix: String = "") -> String {
        let (base, ext) = baseAndExtension(name)
        return SpoolNames.leading(base, bytes: FileSystem.maxNameBytes - suffix.utf8.count - ext.utf8.count)
            + suffix + ext
    }

    /// `name` split where ``suffixedName(_:_:)`` puts its suffix: the archive extension, with its
    /// dot, or nothing.
    private static func baseAndExtension(_ name: String) -> (base: Substring, extension: Substring) {
        // A hidden name has no base to put the suffix in (and is never a bundle the worker reads).
        guard !name.hasPrefix(".") else { return (name[...], "") }
        let lower = name.lowercased()
        let compound = [".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tar.zstd", ".tar.lz", ".tar.z"]
        if let ext = compound.first(where: { lower.hasSuffix($0) && lower.count > $0.count }) {
            return (name.dropLast(ext.count), name.suffix(ext.count))
        }
        // A short alphanumeric extension after a non-empty base: `.zip`, `.tgz`, `.tar`, `.dopesync`.
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            let ext = name[name.index(after: dot)...]
            if (1...8).contains(ext.count) && ext.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) })
                && !ext.allSatisfy(\.isNumber)
            {
                return (name[..<dot], name[dot...])
            }
        }
        return (name[...], "")
    }
}

/// A bundle file seen by a scan.
public struct SpoolEntry: Sendable, Hashable {
    public let name: String
    public let folder: Spool.Folder
    public let size: Int64
    /// The file's mtime: when its producer last wrote it (the `min-age` guard), or a person touched it.
    public let modified: Date
    /// The file's ctime: when it last arrived in a folder (a rename sets it) or changed; no
    /// producer can set it back (``IncomingQueue`` orders by it).
    public let changed: Date
    let device: UInt64
    let inode: UInt64
    /// The name as the folder holds it, where it is not UTF-8 (``name`` is then its `%XX` form,
    /// ``Spool/renameNonUTF8Names(_:)``); nil for every other name.
    var nameBytes: [UInt8]? = nil
}

extension Spool {
    /// The bundles in `incoming/` whose `mtime + minAge <= now`, oldest mtime first (name breaks ties):
    /// the `min-age` rule alone. A run decides what is due with ``IncomingQueue``, which adds the
    /// retry times of the checkpoint store and orders by arrival.
    ///
    /// Kept: regular files (by `lstat`: no symlinks, folders, FIFOs, devices) whose names do not start
    /// with `.` and do not end in `.tmp` or `.part`. A file with an mtime in the future (a producer's
    /// clock ahead) waits until then.
    ///
    /// Cost: one `readdir` pass and one `fstatat` per candidate name, then a sort: about what
    /// `find -printf '%T@' | sort` takes, most of it the kernel's stat (BENCHMARKS.md, "the scan").
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func scan(now: Date = Date(), minAge: Duration = .seconds(5)) throws(SpoolError) -> [SpoolEntry] {
        let (seconds, attoseconds) = minAge.components
        let cutoff = now.timeIntervalSince1970 - (Double(seconds) + Double(attoseconds) / 1e18)
        var entries = try list(.incoming).filter { $0.modified.timeIntervalSince1970 <= cutoff }
        entries.sort { ($0.modified, $0.name) < ($1.modified, $1.name) }
        return entries
    }

    /// The bundles in `processing/`, oldest first: claimed by a live run, or orphans of a dead one
    /// (``claimOrphan(_:)`` tells them apart by their lock).
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func processingEntries() throws(SpoolError) -> [SpoolEntry] {
        var entries = try list(.processing)
        entries.sort { ($0.modified, $0.name) < ($1.modified, $1.name) }
        return entries
    }

    /// Every bundle-like file in `folder` (same filters as ``scan(now:minAge:)`` but no age rule),
    /// unsorted. In `failed/`, sidecars are left out: the names ``sidecarName(forFailed:)`` gives the
    /// bundles there, and a `*.error` whose bundle is gone but whose text is a sidecar. A bundle
    /// whose own name ends in `.error` is a bundle like any other.
    /// Every regular file of `folder`, whatever its name (`tmp/`: a producer's partial files).
    func listAllFiles(_ folder: Folder) throws(SpoolError) -> [SpoolEntry] {
        try list(folder, bundlesOnly: false)
    }

    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func list(_ folder: Folder) throws(SpoolError) -> [SpoolEntry] {
        try list(folder, bundlesOnly: true)
    }

    private func list(_ folder: Folder, bundlesOnly: Bool) throws(SpoolError) -> [SpoolEntry] {
        let directoryPath = path(folder)
        BlockingCalls.check("spool: listing \(directoryPath)")
        guard let directory = opendir(directoryPath) else {
            throw SpoolError(code: .scanFailed, message: "cannot list spool folder", path: directoryPath, errno: errno)
        }
        defer { closedir(directory) }
        let descriptor = dirfd(directory)
        var entries: [SpoolEntry] = []
        while true {
            errno = 0
            guard let entry = readdir(directory) else {
                if errno != 0 {
                    throw SpoolError(
                        code: .scanFailed, message: "cannot read spool folder", path: directoryPath, errno: errno)
                }
                break
            }
            // d_type spares an fstatat for folders and symlinks; DT_UNKNOWN (some filesystems) falls through.
            let type = entry.pointee.d_type
            if type == UInt8(DT_DIR) || type == UInt8(DT_LNK) { continue }
            let bytes = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix(while: { $0 != 0 })) }
            // A name that is not UTF-8 is listed under the name a run gives it
            // (``renameNonUTF8Names()``), so that status counts it; it is never skipped.
            let utf8 = SpoolNames.utf8(bytes)
            let name = utf8 ?? SpoolNames.escaped(bytes)
            guard !bundlesOnly || Self.isBundleName(name), name != ".", name != ".." else { continue }
            var info = stat()
            // AT_SYMLINK_NOFOLLOW: lstat semantics. ENOENT: claimed or moved since readdir; skip it.
            let statted = withUnsafePointer(to: entry.pointee.d_name) {
                fstatat(
                    descriptor, UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self), &info, AT_SYMLINK_NOFOLLOW)
            }
            guard statted == 0 else { continue }
            guard info.st_mode & S_IFMT == S_IFREG else { continue }
            entries.append(
                SpoolEntry(
                    name: name, folder: folder, size: Int64(info.st_size), modified: spoolDate(info.st_mtim),
                    changed: spoolDate(info.st_ctim), device: UInt64(info.st_dev), inode: UInt64(info.st_ino),
                    nameBytes: utf8 == nil ? bytes : nil))
        }
        return folder == .failed ? withoutSidecars(entries) : entries
    }

    private func withoutSidecars(_ entries: [SpoolEntry]) -> [SpoolEntry] {
        let sidecars = Set(entries.map { Self.sidecarName(forFailed: $0.name) })
        var folder = stat()
        let folderOwner = stat(path(.failed), &folder) == 0 ? folder.st_uid : nil
        return entries.filter { entry in
            guard entry.name.hasSuffix(ErrorSidecar.suffix) else { return true }
            if sidecars.contains(entry.name) { return false }
            // A sidecar whose bundle is gone (moved by hand): the worker's own file (producers own
            // their bundles, and the worker owns failed/), whose `bundle:` line names this sidecar.
            var info = stat()
            guard lstat(path(.failed, entry.name), &info) == 0, info.st_uid == folderOwner,
                let sidecar = ErrorSidecar.read(from: path(.failed, entry.name)),
                Self.sidecarName(forFailed: sidecar.bundle) == entry.name
            else { return true }
            return false
        }
    }

    /// Whether a name is one the worker reads: not hidden, not a partial file.
    public static func isBundleName(_ name: String) -> Bool {
        !name.isEmpty && !name.hasPrefix(".") && !name.hasSuffix(".tmp") && !name.hasSuffix(".part")
    }
}

package func spoolDate(_ time: timespec) -> Date {
    Date(timeIntervalSince1970: Double(time.tv_sec) + Double(time.tv_nsec) / 1e9)
}

package func spoolTimespec(_ date: Date) -> timespec {
    let interval = date.timeIntervalSince1970
    var seconds = interval.rounded(.down)
    var nanoseconds = ((interval - seconds) * 1e9).rounded()
    if nanoseconds >= 1e9 {
        seconds += 1
        nanoseconds -= 1e9
    }
    return timespec(tv_sec: Int(seconds), tv_nsec: Int(nanoseconds))
}
