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
    public static let loops: any TaskExecutor = EventLoopsTaskExecutor(group: .singleton)

    /// Call first thing in `main`, before any task runs; `dopesync run` and `dopesync-bench` do.
    public static func install() {
        _ = NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }
}

package final class EventLoopsTaskExecutor: TaskExecutor {
    private let group: MultiThreadedEventLoopGroup

    init(group: MultiThreadedEventLoopGroup) {
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
