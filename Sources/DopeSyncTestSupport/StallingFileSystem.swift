import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A spool's file system that stalls, as a `hard` NFS mount does while its server is gone: a FUSE
/// file system (`Tests/FUSE/stalling-passthrough.c`) that passes every call through to a backing
/// folder, and holds each rename whose source path contains a given piece until ``release()``
/// (or, should a test never release it, for `STALL_LIMIT` seconds, 120, each such rename).
/// The rename waits in the kernel, which meanwhile holds its folders' locks and the file
/// system's rename lock: every other move between the spool's folders, and every listing of the
/// two folders, waits behind it, whichever thread asks. Built with the system's C compiler and
/// libfuse3 (`make deps` installs `libfuse3-dev`); mounting needs root and `/dev/fuse`.
public final class StallingFileSystem: Sendable {
    /// Where the file system is mounted: make the spool here.
    public let mountPoint: URL
    /// The folder it passes through to: what is on disk, read without going through the stall.
    public let backing: URL
    private let gate: String
    private let daemon: Spawned
    /// Whether the file system said it holds a rename (false: it ended without saying so).
    private let said: Task<Bool, Never>

    private init(mountPoint: URL, backing: URL, gate: String, daemon: Spawned, said: Task<Bool, Never>) {
        self.mountPoint = mountPoint
        self.backing = backing
        self.gate = gate
        self.daemon = daemon
        self.said = said
    }

    /// Returns true once the file system holds a rename, or false if `run` ends first (a run
    /// that fails before it moves anything must fail its test, not hold it).
    public func held(before run: Spawned) async -> Bool {
        let (first, answer) = AsyncStream.makeStream(of: Bool.self)
        Task {
            await run.finished()
            answer.yield(false)
        }
        Task { [said] in answer.yield(await said.value) }
        for await held in first { return held }
        return false
    }

    /// Lets every held rename go, and every later one through.
    public func release() {
        unlink(gate)
    }

    /// Mounts a file system over a new folder in `directory` that holds every rename whose source
    /// path (from the mount's root: `/processing/NAME`) contains `match`, runs `body`, then lets
    /// the renames go and unmounts it, whatever `body` did.
    public static func with<T>(
        in directory: URL, holdingRenamesOf match: String, _ body: (StallingFileSystem) async throws -> T
    ) async throws -> T {
        let fileSystem = try await mount(in: directory, holdingRenamesOf: match)
        do {
            let result = try await body(fileSystem)
            try await uncancelled { try await fileSystem.unmount() }
            return result
        } catch {
            try? await uncancelled { try await fileSystem.unmount() }
            throw error
        }
    }

    private static func mount(in directory: URL, holdingRenamesOf match: String) async throws -> StallingFileSystem {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Tests/FUSE/stalling-passthrough.c").standardizedFileURL
        let program = directory.appendingPathComponent("stalling-passthrough").path
        let flags = try await runProcess("pkg-config", ["--cflags", "--libs", "fuse3"]).stdout
            .split(whereSeparator: \.isWhitespace).map(String.init)
        _ = try await runProcess("/usr/bin/cc", ["-O1", "-o", program, source.path] + flags)
        let backing = directory.appendingPathComponent("backing")
        let mountPoint = directory.appendingPathComponent("mounted")
        for folder in [backing, mountPoint] {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
        }
        let gate = directory.appendingPathComponent("stall.gate").path
        guard FileManager.default.createFile(atPath: gate, contents: nil) else { throw POSIXError(.EIO) }
        let daemon = try await Spawned(
            program, [backing.path, mountPoint.path, "-o", "default_permissions,fsname=dopesync-stall"],
            environment: ["PATH": "/usr/bin:/bin", "STALL_MATCH": match, "STALL_GATE": gate],
            errors: .file(directory.appendingPathComponent("stalling-passthrough.stderr").path))
        // It says "ready" once the kernel has the mount (it ends at once if it cannot mount), then
        // "held" when it first holds a rename.
        let (ready, readiness) = AsyncStream.makeStream(of: Bool.self)
        let said = Task<Bool, Never> {
            defer { readiness.yield(false) }
            for await line in daemon.lines() {
                if line == "ready" { readiness.yield(true) }
                if line == "held" { return true }
            }
            return false
        }
        for await mounted in ready {
            guard mounted else { break }
            return StallingFileSystem(mountPoint: mountPoint, backing: backing, gate: gate, daemon: daemon, said: said)
        }
        _ = await daemon.finished()
        throw MountFailed(detail: daemon.errorText)
    }

    /// Lets the renames go and unmounts; the daemon ends with its mount. Lazily if something still
    /// uses it (a test that failed with a child inside): the daemon is then ended with SIGTERM.
    private func unmount() async throws {
        release()
        if try await !DopeSyncTestSupport.unmount(mountPoint) { daemon.kill(SIGTERM) }
        await daemon.finished()
    }

    public struct MountFailed: Error, CustomStringConvertible {
        public let detail: String
        public var description: String { "the stalling file system did not mount: \(detail)" }
    }
}
