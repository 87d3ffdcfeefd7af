import Foundation
import NIOCore
import NIOPosix

/// Where the tasks of an upload run in a process: NIO's event loops as Swift's global executor
/// (a bundle's task resumes on the loop where its answer arrived, without a hop to another
/// thread; ARCHITECTURE.md, "Threads"), unless `DOPESYNC_EXECUTOR=cooperative` keeps Swift's own
/// pool, for measuring the choice again (BENCHMARKS.md). The library is correct under either.
public enum UploadExecutor {
    /// Call first thing in `main`, before any task runs; `dopesync run` and `dopesync-bench` do.
    public static func install() {
        guard ProcessInfo.processInfo.environment["DOPESYNC_EXECUTOR"] != "cooperative" else { return }
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }
}
