import NIOPosix

/// NIO's process-wide blocking-work pool: where a call that may wait for the disk, a lock or a
/// child process runs, so that no event loop (the global executor in `dopesync`) waits for it.
enum BlockingPool {
    /// Runs `body` on the pool and returns its value.
    static func run<Value: Sendable>(_ body: @escaping @Sendable () -> Value) async -> Value {
        // The pool refuses work only once shut down, which the process-wide one never is, or when
        // the task is cancelled before it starts (uploads are not cancelled): then run it here.
        (try? await NIOThreadPool.singleton.runIfActive(body)) ?? body()
    }

    /// A spool move (rename, sidecar, folder syncs) on the pool.
    static func spoolMove<Value: Sendable>(_ move: @escaping @Sendable () throws(SpoolError) -> Value)
        async throws(SpoolError) -> Value
    {
        try await run { Result { () throws(SpoolError) in try move() } }.get()
    }
}
