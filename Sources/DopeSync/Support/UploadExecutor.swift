import Foundation
import NIOCore
import NIOPosix

/// Where the tasks of an upload run in a process: NIO's event loops as Swift's global executor
/// (a bundle's task resumes on the loop where its answer arrived, without a hop to another
/// thread; ARCHITECTURE.md, "Threads"). It is the one executor `run` has: a cooperative-pool
/// mode, kept for measuring, gave every blocking call a branch that `run` never took.
public enum UploadExecutor {
    /// Call first thing in `main`, before any task runs; `dopesync run` and `dopesync-bench` do.
    public static func install() {
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }
}
