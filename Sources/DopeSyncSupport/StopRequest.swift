import NIOCore
import NIOPosix
import Synchronization

/// A request to stop a run early (SIGINT, SIGTERM), safe to make from a signal handler's queue.
///
/// Once requested, the run claims nothing more and its steps in flight may finish for ``grace``;
/// then every wait made through ``sleep(for:endsAtRequest:)`` or ``sleep(_:for:endsAtRequest:)``
/// ends, which cancels the requests still in flight
/// (`APIClient`), so a server that answers one byte at a time cannot hold the run past the
/// unit's `TimeoutStopSec`. What they were doing is an unknown outcome, looked up next run.
public final class StopRequest: Sendable {
    /// How long the requests in flight may go on after the stop is requested.
    public let grace: Duration

    fileprivate struct Waiter {
        let continuation: CheckedContinuation<Wake, Never>
        let endsAtRequest: Bool
        var timer: Scheduled<Void>?
    }
    /// Where a wait is: made (``makeWait()``), ended before it began (``Wait/end()``; it returns
    /// at once when it begins), or waiting. A wait that has returned is gone.
    fileprivate enum Entry {
        case made
        case endedEarly
        case waiting(Waiter)
    }
    private struct Waiters {
        var graceOver = false
        var nextID: UInt64 = 0
        var waits: [UInt64: Entry] = [:]

        /// Takes out the waiters that `isWoken` picks.
        mutating func removeWaiters(where isWoken: (Waiter) -> Bool) -> [Waiter] {
            var woken: [Waiter] = []
            for (id, entry) in waits {
                if case .waiting(let waiter) = entry, isWoken(waiter) {
                    woken.append(waiter)
                    waits[id] = nil
                }
            }
            return woken
        }

        /// Takes out the waiter `id`, if it waits.
        mutating func removeWaiter(_ id: UInt64) -> Waiter? {
            guard case .waiting(let waiter) = waits[id] else { return nil }
            waits[id] = nil
            return waiter
        }
    }
    private let flag = Atomic<Bool>(false)
    private let waiters = Mutex(Waiters())

    public init(grace: Duration = .seconds(10)) {
        self.grace = grace
    }

    public var isRequested: Bool { flag.load(ordering: .relaxed) }

    /// Stops claiming now, and ends the grace of what is in flight ``grace`` later. Only the first
    /// request counts.
    public func request() {
        guard !flag.exchange(true, ordering: .relaxed) else { return }
        let woken = waiters.withLock { $0.removeWaiters { $0.endsAtRequest } }
        for waiter in woken { waiter.resume(.stopRequested) }
        MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: TimeAmount(grace)) {
            self.endGrace()
        }
    }

    /// Why a wait (``sleep(for:endsAtRequest:)``, ``sleep(_:for:endsAtRequest:)``) returned.
    package enum Wake: Sendable, Equatable {
        case timeUp
        /// The run was asked to stop (a wait that ends at the request).
        case stopRequested
        /// The run was asked to stop, and the grace of what was in flight is over.
        case graceOver
        case cancelled
        /// The wait was ended by whoever it waited for (``Wait/end()``).
        case ended
    }

    /// A wait that another task ends when what it waits for is done
    /// (``sleep(_:for:endsAtRequest:)``): one task waits for another, or for a deadline or the
    /// stop, whichever comes first. Sleep on each exactly once, on the ``StopRequest`` that made
    /// it: a wait made and never slept on stays in its books.
    package struct Wait: Sendable {
        fileprivate let id: UInt64
        fileprivate let stop: StopRequest

        /// Ends the wait (``Wake/ended``), whether it has begun or not; later calls do nothing.
        package func end() { stop.end(id) }
    }

    /// A wait to begin with ``sleep(_:for:endsAtRequest:)`` and end with ``Wait/end()``.
    package func makeWait() -> Wait {
        let id = waiters.withLock { waiters in
            defer { waiters.nextID += 1 }
            waiters.waits[waiters.nextID] = .made
            return waiters.nextID
        }
        return Wait(id: id, stop: self)
    }

    /// Waits `duration`, or less: until the grace after a stop is over (or, with `endsAtRequest`,
    /// until the stop is requested), or the task is cancelled. One continuation and one
    /// event-loop timer, cancelled when woken otherwise; no task.
    package func sleep(for duration: Duration, endsAtRequest: Bool = false) async -> Wake {
        // Made before the handler, which must know whom to wake.
        await sleep(makeWait(), for: duration, endsAtRequest: endsAtRequest)
    }

    /// ``sleep(for:endsAtRequest:)``, which `wait`'s ``Wait/end()`` also ends (``Wake/ended``).
    package func sleep(_ wait: Wait, for duration: Duration, endsAtRequest: Bool = false) async -> Wake {
        // Registered under the same lock as its wake-ups below.
        precondition(wait.stop === self, "a wait is slept on where it was made")
        let id = wait.id
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ended = waiters.withLock { waiters -> Wake? in
                    switch waiters.waits.removeValue(forKey: id) {
                    case .made: break
                    case .endedEarly: return .ended
                    case .waiting, nil: preconditionFailure("each wait is slept on once")
                    }
                    if waiters.graceOver { return .graceOver }
                    if endsAtRequest && isRequested { return .stopRequested }
                    let waiter = Waiter(continuation: continuation, endsAtRequest: endsAtRequest, timer: nil)
                    waiters.waits[id] = .waiting(waiter)
                    return nil
                }
                if let ended { return continuation.resume(returning: ended) }
                let timer = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(
                    in: TimeAmount(duration)
                ) { self.wake(id, .timeUp) }
                let waiting = waiters.withLock { waiters -> Bool in
                    guard case .waiting(var waiter) = waiters.waits[id] else { return false }
                    waiter.timer = timer
                    waiters.waits[id] = .waiting(waiter)
                    return true
                }
                if !waiting { timer.cancel() }
                // Cancelled before the continuation was registered: the handler found nothing.
                if Task.isCancelled { wake(id, .cancelled) }
            }
        } onCancel: {
            self.wake(id, .cancelled)
        }
    }

    /// The waits made and not over yet (made, begun, or ended before they began): none once
    /// every wait made has been slept on and has returned. For the tests.
    package var waitsNotOver: Int { waiters.withLock { $0.waits.count } }

    /// Whether the wait has begun and waits now. For the tests.
    package func isWaiting(_ wait: Wait) -> Bool {
        waiters.withLock { waiters in
            if case .waiting = waiters.waits[wait.id] { return true }
            return false
        }
    }

    /// Ends the wait `id`: wakes it, or makes it return at once when it begins; a wait already
    /// over is left alone.
    private func end(_ id: UInt64) {
        let waiter = waiters.withLock { waiters -> Waiter? in
            if case .made = waiters.waits[id] { waiters.waits[id] = .endedEarly }
            return waiters.removeWaiter(id)
        }
        waiter?.resume(.ended)
    }

    /// Resumes the waiter `id` once, whoever comes first, and cancels its timer.
    private func wake(_ id: UInt64, _ wake: Wake) {
        waiters.withLock { $0.removeWaiter(id) }?.resume(wake)
    }

    private func endGrace() {
        let woken = waiters.withLock { waiters in
            waiters.graceOver = true
            return waiters.removeWaiters { _ in true }
        }
        for waiter in woken { waiter.resume(.graceOver) }
    }
}

extension StopRequest.Waiter {
    fileprivate func resume(_ wake: StopRequest.Wake) {
        timer?.cancel()
        continuation.resume(returning: wake)
    }
}
