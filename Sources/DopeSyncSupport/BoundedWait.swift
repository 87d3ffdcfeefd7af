import NIOCore
import NIOPosix
import Synchronization

/// Waits for `body` at most `limit`, and then stops waiting whether or not `body` stops.
///
/// A task group cannot do this: it waits for every child, so a child that ignores cancellation
/// (a query on a connection the server dropped, in postgres-nio 1.33) holds the caller for ever.
/// Here `body` runs in a task of its own, which is cancelled when the time is up and left to end
/// when it will; the caller goes on with ``TimedOut``. Cancelling the caller cancels `body` too.
package func withBoundedWait<Value: Sendable>(
    _ limit: Duration, _ body: @escaping @Sendable () async throws -> Value
) async throws -> Value {
    let race = BoundedWaitRace<Value>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { continuation in
            race.start(continuation, limit: limit, body)
        }
    } onCancel: {
        race.finish(.failure(CancellationError()))
    }
}

/// The time given to ``withBoundedWait(_:_:)`` ran out.
package struct TimedOut: Error, CustomStringConvertible {
    package init() {}
    package var description: String { "no answer in time" }
}

/// Whichever ends first, the work or its timer, resumes the waiter; the other is cancelled.
private final class BoundedWaitRace<Value: Sendable>: Sendable {
    private struct State {
        var waiter: CheckedContinuation<Value, any Error>?
        var work: Task<Void, Never>?
        var timer: Scheduled<Void>?
        var finished = false
    }
    private let state = Mutex(State())

    func start(
        _ waiter: CheckedContinuation<Value, any Error>, limit: Duration,
        _ body: @escaping @Sendable () async throws -> Value
    ) {
        let alreadyFinished = state.withLock { state in
            state.waiter = waiter
            return state.finished
        }
        if alreadyFinished {
            waiter.resume(throwing: CancellationError())
            return
        }
        // Unstructured tasks inherit no executor preference: named, so both stay where the run is.
        let work = Task(executorPreference: UploadExecutor.loops) {
            do {
                self.finish(.success(try await body()))
            } catch {
                self.finish(.failure(error))
            }
        }
        // Scheduled on a loop, not `Task.sleep`: NIO's global executor takes no delayed job, so a
        // sleep would wake Dispatch's timer thread and a worker of its own, for every statement.
        // Weak: what the wait holds is let go with it, not on the loop that drops the closure.
        let timer = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: TimeAmount(limit)) {
            [weak self] in
            guard let self else { return }
            finish(.failure(TimedOut()))
        }
        state.withLock { state in
            state.work = work
            state.timer = timer
            if state.finished {
                work.cancel()
                timer.cancel()
            }
        }
    }

    func finish(_ result: Result<Value, any Error>) {
        let (waiter, work, timer) = state.withLock {
            state -> (CheckedContinuation<Value, any Error>?, Task<Void, Never>?, Scheduled<Void>?) in
            if state.finished { return (nil, nil, nil) }
            state.finished = true
            defer { state.waiter = nil }
            return (state.waiter, state.work, state.timer)
        }
        work?.cancel()
        timer?.cancel()
        waiter?.resume(with: result)
    }
}
