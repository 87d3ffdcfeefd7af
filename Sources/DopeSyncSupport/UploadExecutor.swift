import NIOCore
import NIOPosix

/// Where the tasks of an upload run: NIO's event loops (ARCHITECTURE.md, "Threads"). A bundle's
/// task resumes on the loop where its answer arrived, without a hop to another thread.
///
/// `Worker.run` prefers ``loops`` as its task executor, so a run in any process (`dopesync run`,
/// the tests' in-process runs, the benchmarks) takes the same path on the same threads: the
/// run's child tasks and the default actors it calls run on the loops, and every blocking call
/// on that path must go to a thread of its own or stop a debug build (`BlockingCalls`).
/// ``install()`` makes the loops Swift's global executor as well, for `dopesync run` and the
/// benchmarks, so that what a library starts outside the run's task tree (postgres-nio's pool)
/// lands there too.
public enum UploadExecutor {
    /// NIO's singleton loops as a task executor. A job goes to the loop it was enqueued from when
    /// that is one of them (`any()` is sticky), as NIO's global-executor hook does.
    public static let loops: any TaskExecutor = EventLoopsTaskExecutor(group: MultiThreadedEventLoopGroup.singleton)

    /// Where one run's tasks and HTTP connections go (``placement(bundlesInFlight:)``).
    public struct Placement: Sendable {
        /// The run's task executor: its tasks, and the answers of the writer and the spool's threads.
        public let executor: any TaskExecutor
        /// The loops the run's HTTP client keeps its connections on.
        public let group: any EventLoopGroup
    }

    /// One loop carries the bundles in flight up to this many; above, the run takes every loop.
    public static let bundlesPerLoop = 16

    /// The loops of NIO's singleton group a run of `bundlesInFlight` bundles at once uses: one,
    /// pinned, up to ``bundlesPerLoop``; all of them (``loops``) above.
    ///
    /// Why one: a loop that waits between answers sleeps and is woken for each, and a task that a
    /// writer or the spool's threads resume lands on the next loop in turn, away from its
    /// connection. Spread over two loops, a run of a few bundles switched threads far more often
    /// than the raw client, whose connections all stay on one loop; on one loop it used less CPU
    /// at the same pace. Many bundles at once need every loop: at 64, one loop was the run's
    /// bottleneck. The figures are in BENCHMARKS.md.
    public static func placement(bundlesInFlight: Int) -> Placement {
        let group = MultiThreadedEventLoopGroup.singleton
        guard bundlesInFlight <= bundlesPerLoop else { return Placement(executor: loops, group: group) }
        // A loop is a group of one: its `any()` is itself.
        let loop = group.next()
        return Placement(executor: EventLoopsTaskExecutor(group: loop), group: loop)
    }

    /// Call first thing in `main`, before any task runs; `dopesync run` and `dopesync-bench` do.
    public static func install() {
        _ = NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }
}

package final class EventLoopsTaskExecutor: TaskExecutor {
    private let group: any EventLoopGroup

    init(group: any EventLoopGroup) {
        self.group = group
    }

    /// The job runs as this task executor's, not the loop's serial executor's: the runtime then
    /// sees that a nonisolated call is already where the task prefers, and makes no hop.
    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        group.any().execute { job.runSynchronously(on: executor) }
    }
}
