import Foundation

/// A spool on a file system without `RENAME_NOREPLACE` (NFS, some overlay mounts), for a child:
/// a small library preloaded into it (`LD_PRELOAD`) answers EINVAL to every no-replace
/// `renameat2`, so each of its moves takes the link-then-unlink way, as on such a mount. This
/// machine has no NFS client.
public struct NoReplaceRenameRefused: Sendable {
    /// The variables that load the library into a child.
    public let environment: [String: String]

    /// Builds the library with the system's C compiler into `directory`. With
    /// `unlinkOfNonASCIIReports`, an unlink of a path with a byte that is not ASCII is carried
    /// out and then reports that errno, as an NFS request sent again does.
    public init(in directory: URL, unlinkOfNonASCIIReports: Int32? = nil) async throws {
        let library = try await buildPreloadedShim("no-replace-rename-refused.c", into: directory)
        environment = ["LD_PRELOAD": library].merging(
            unlinkOfNonASCIIReports.map { ["NFS_UNLINK_REPORTS": "\($0)"] } ?? [:]
        ) { $1 }
    }
}
