import DopeSyncBundle
import DopeSyncSupport
import NIOPosix

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where a run's spool system calls run: a thread pool of their own, never an event loop, and
/// not NIO's blocking pool, which validates bundles. The README recommends a `hard` NFS mount for
/// several hosts, and a stalled NFS server holds a rename, a readdir or a `statvfs` until it is
/// back: on an event loop that would also stall the connections, postgres-nio and the lease
/// renewals that share it, and every lease on the host could be lost at once. Here a stalled
/// call holds one thread; the other bundles, their validation and the renewals go on.
///
/// Every spool call a run makes goes through ``run(_:)``: the claim (open, flock, rename), the
/// free-space check, the listings of the spool, the moves, the metrics file, the token file.
package enum SpoolCalls {
    /// Eight threads, started once for the process: up to seven stalled calls leave one to work.
    /// A pool this size costs nothing while idle.
    static let pool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: 8)
        pool.start()
        return pool
    }()

    /// Runs `body` on the pool and returns its value, whether or not the calling task is
    /// cancelled meanwhile (a call half made must be seen to its end).
    package static func run<Value: Sendable>(_ body: @escaping @Sendable () -> Value) async -> Value {
        await pool.runToCompletion(body)
    }

    /// Closes `descriptor` on the pool, without waiting: for a `deinit`, which may run on an
    /// event loop, of a descriptor that holds a lock (over NFS its close waits for the server).
    package static func closeLater(_ descriptor: Int32) {
        later { SpoolFiles.unlockAndClose(descriptor) }
    }

    /// Runs `body` on the pool, without waiting: for a `deinit` that lets spool files go.
    package static func later(_ body: @escaping @Sendable () -> Void) {
        pool.submit { _ in body() }
    }

    /// ``run(_:)`` for a call that throws.
    package static func run<Value: Sendable, Failure: Error>(_ body: @escaping @Sendable () throws(Failure) -> Value)
        async throws(Failure) -> Value
    {
        try await run { Result { () throws(Failure) in try body() } }.get()
    }
}
