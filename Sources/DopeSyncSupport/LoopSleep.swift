import NIOCore
import NIOPosix
import Synchronization

/// `Task.sleep(for:)` on one of NIO's event loops: one event-loop timer and one continuation,
/// woken early when the task is cancelled (then it throws `CancellationError`).
///
/// Why: NIO's global executor (``UploadExecutor/install()``) takes only jobs to run now, so a
/// `Task.sleep` wakes Dispatch's timer thread, then one of Dispatch's workers, and only then the
/// task's loop; a run sleeps between retries, under a rate cap before each chunk of a body, and
/// for its progress line. ``StopRequest/sleep(for:endsAtRequest:)`` is the same with a stop's ends.
package func sleepOnLoop(for duration: Duration) async throws(CancellationError) {
    let sleep = LoopSleep()
    let timeUp = await withTaskCancellationHandler {
        await withCheckedContinuation { continuation in sleep.begin(continuation, duration: duration) }
    } onCancel: {
        sleep.end(timeUp: false)
    }
    if !timeUp { throw CancellationError() }
}

/// One sleep's continuation and timer; whichever of the timer and the cancellation comes first
/// resumes it, once.
private final class LoopSleep: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Bool, Never>?
        var timer: Scheduled<Void>?
        /// Set once it is over: true when the time ran out, false when cancelled.
        var outcome: Bool?
    }
    private let state = Mutex(State())

    func begin(_ continuation: CheckedContinuation<Bool, Never>, duration: Duration) {
        // Cancelled before it began: the handler found no continuation to resume.
        if let outcome = state.withLock({ state -> Bool? in
            if state.outcome == nil { state.continuation = continuation }
            return state.outcome
        }) {
            return continuation.resume(returning: outcome)
        }
        let timer = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: TimeAmount(duration)) {
            self.end(timeUp: true)
        }
        let kept = state.withLock { state -> Bool in
            guard state.outcome == nil else { return false }
            state.timer = timer
            return true
        }
        if !kept { timer.cancel() }
    }

    func end(timeUp: Bool) {
        let (continuation, timer) = state.withLock {
            state -> (CheckedContinuation<Bool, Never>?, Scheduled<Void>?) in
            guard state.outcome == nil else { return (nil, nil) }
            state.outcome = timeUp
            defer { (state.continuation, state.timer) = (nil, nil) }
            return (state.continuation, state.timer)
        }
        timer?.cancel()
        continuation?.resume(returning: timeUp)
    }
}
