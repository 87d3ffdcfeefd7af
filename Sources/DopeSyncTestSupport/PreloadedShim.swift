import DopeSyncStore
import Foundation

/// Builds `Tests/Shims/SOURCE` (a C file) with the system's compiler into `directory`, as a
/// library for a child to preload (`LD_PRELOAD`); returns the library's path. The shims make a
/// child's C library calls fail or wait the way a file system does that this machine lacks.
func buildPreloadedShim(_ source: String, into directory: URL) async throws -> String {
    let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../Tests/Shims/\(source)").standardizedFileURL
    let library = directory.appendingPathComponent("lib" + file.deletingPathExtension().lastPathComponent + ".so").path
    _ = try await runProcess("/usr/bin/cc", ["-shared", "-fPIC", "-O1", "-o", library, file.path, "-ldl"])
    return library
}

/// A file system that cannot open a file for a reason of its own, for a child: every `open` and
/// `openat` of a path containing ``match`` fails with one errno (EMFILE: the descriptor table
/// full; EIO, ESTALE: a disk or an NFS server failing), whatever the file.
public struct OpenRefused: Sendable {
    /// The variables that load the library into a child and aim it.
    public let environment: [String: String]

    public init(in directory: URL, opensOf match: String, failWith errno: Int32) async throws {
        let library = try await buildPreloadedShim("open-refused.c", into: directory)
        environment = ["LD_PRELOAD": library, "OPEN_REFUSED_MATCH": match, "OPEN_REFUSED_ERRNO": "\(errno)"]
    }
}

/// Locks as an NFS v4 client takes them, for a child: `flock` becomes a byte-range lock on the
/// server, and an exclusive one on a descriptor open only for reading fails with EBADF, for
/// every file whose path contains ``match`` (this machine has no NFS client to mount one).
public struct NFSLocks: Sendable {
    /// The variables that load the library into a child and aim it.
    public let environment: [String: String]

    /// `refusingAllWith`: every lock of such a file fails with this errno instead (ENOLCK: a
    /// mount whose lock service is not running).
    public init(in directory: URL, locksOf match: String, refusingAllWith errno: Int32? = nil) async throws {
        let library = try await buildPreloadedShim("nfs-locks.c", into: directory)
        environment = ["LD_PRELOAD": library, "NFS_LOCKS_MATCH": match].merging(
            errno.map { ["NFS_LOCKS_REFUSE": "\($0)"] } ?? [:]
        ) { $1 }
    }
}

/// A wall clock ahead of the real one, for a child: a machine that booted with its clock wrong
/// (no battery-backed clock) and runs before NTP sets it right. The monotonic clocks are left.
/// `synchronized`: the kernel also reports the clock synchronized, as NTP keeps it (true), or
/// not (false), whatever this machine's is; nil: as it is.
public struct ClockAhead: Sendable {
    /// The variables that load the library into a child and set it ahead.
    public let environment: [String: String]

    public init(in directory: URL, by ahead: Duration, synchronized: Bool? = nil) async throws {
        let library = try await buildPreloadedShim("clock-ahead.c", into: directory)
        environment = ["LD_PRELOAD": library, "CLOCK_AHEAD_SECONDS": "\(ahead.components.seconds)"].merging(
            synchronized.map { ["CLOCK_SYNCHRONIZED": $0 ? "1" : "0"] } ?? [:]
        ) { $1 }
    }
}

extension ClockFacts {
    /// A clock that the kernel calls synchronized or not, whatever this machine's is, with no boot
    /// id: first sights get no stamp, and ages count by the wall clock (or from a deferral, for a
    /// first sight ahead of a synchronized clock).
    public static func fixed(synchronized: Bool) -> ClockFacts {
        ClockFacts(isSynchronized: { synchronized }, bootInstant: { nil })
    }
}
