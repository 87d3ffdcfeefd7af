/// `Task.sleep(for:)` on one of NIO's event loops, woken early when the task is cancelled (then it
/// throws `CancellationError`): ``StopRequest/sleep(for:endsAtRequest:)`` on a stop that is never
/// requested, so one event-loop timer and one continuation, as every wait of a request has.
///
/// Why: NIO's global executor (``UploadExecutor/install()``) takes only jobs to run now, so a
/// `Task.sleep` wakes Dispatch's timer thread, then one of Dispatch's workers, and only then the
/// task's loop; a run sleeps between retries, under a rate cap before each chunk of a body, and
/// for its progress line.
package func sleepOnLoop(for duration: Duration) async throws(CancellationError) {
    if await neverRequested.sleep(for: duration) != .timeUp { throw CancellationError() }
}

/// Never requested, so its sleeps end only at their time or by cancellation.
private let neverRequested = StopRequest()
