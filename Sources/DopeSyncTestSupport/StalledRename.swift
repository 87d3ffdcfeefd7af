import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A spool whose file system stalls a rename, as a `hard` NFS mount does while its server is
/// gone: a small library preloaded into a child (`LD_PRELOAD`) holds every `rename`, `renameat`
/// and `renameat2` whose source path contains ``match`` until ``gate`` is removed, and says once,
/// on a FIFO, that it holds one. The stall is in the C library's calls the worker makes, so
/// whichever thread makes them waits, as it would on a real mount.
public final class StalledRename: Sendable {
    /// The variables that load the library into a child and aim it.
    public let environment: [String: String]
    /// While this file exists, a matching rename waits.
    public let gate: String
    private let notice: String

    /// Builds the library with the system's C compiler into `directory`; `match` is a piece of
    /// the path of the renames to hold (a bundle's name).
    public init(in directory: URL, holdingRenamesOf match: String) async throws {
        let library = try await buildPreloadedShim("stalled-rename.c", into: directory)
        gate = directory.appendingPathComponent("stall.gate").path
        notice = directory.appendingPathComponent("stall.notice").path
        guard FileManager.default.createFile(atPath: gate, contents: nil) else { throw POSIXError(.EIO) }
        guard mkfifo(notice, 0o600) == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        environment = ["LD_PRELOAD": library, "STALL_MATCH": match, "STALL_GATE": gate, "STALL_NOTICE": notice]
    }

    /// Returns once a child holds a rename (it opened the FIFO and said so).
    public func held() async -> Bool {
        await onOwnThread { [notice] in
            guard let handle = FileHandle(forReadingAtPath: notice) else { return false }
            defer { try? handle.close() }
            return handle.readLine() == "held"
        }
    }

    /// Lets every held rename go, and every later one through.
    public func release() {
        unlink(gate)
    }
}
