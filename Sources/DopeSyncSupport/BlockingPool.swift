import NIOPosix
import ThreadRules

/// NIO's process-wide blocking-work pool: where a call that may wait for the disk, a lock or a
/// child process runs, so that no event loop (the global executor in `dopesync`) waits for it.
package enum BlockingPool {
    /// Runs `body` on the pool and returns its value.
    /// Not cancellable: `runIfActive` would give up on a cancelled task, and the work would then
    /// have to run where the caller is, an event loop perhaps.
    package static func run<Value: Sendable>(_ body: @escaping @Sendable () -> Value) async -> Value {
        await NIOThreadPool.singleton.runToCompletion(body)
    }
}

extension NIOThreadPool {
    /// Runs `body` on one of the pool's threads and returns its value, whether or not the calling
    /// task is cancelled meanwhile. A pool already shut down (which the process-wide one never is)
    /// runs it on the thread that hands it back.
    package func runToCompletion<Value: Sendable>(_ body: @escaping @Sendable () -> Value) async -> Value {
        await withCheckedContinuation { continuation in
            submit { _ in continuation.resume(returning: body()) }
        }
    }
}
