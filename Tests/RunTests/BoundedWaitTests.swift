import DopeSyncSupport
import Synchronization
import Testing

@testable import DopeSync

/// ``withBoundedWait(_:_:)``, the bound on every PostgreSQL statement of a run: the answer if it
/// comes in time; ``TimedOut`` at the limit even when the work ignores its cancellation (a query
/// on a connection the server dropped), which is then cancelled; and the caller's cancellation
/// passed on to the work. A bound that missed would hold a run past its statement limit (90 s
/// here, past the suite's time limit).
@Suite(.timeLimit(.minutes(3))) struct BoundedWaitTests {
    @Test("an answer within the limit is returned")
    func answerInTime() async throws {
        #expect(try await withBoundedWait(.seconds(90)) { 42 } == 42)
    }

    @Test("work that ignores its cancellation: the caller goes on with TimedOut at the limit")
    func timedOutWhateverTheWorkDoes() async throws {
        let (released, release) = AsyncStream.makeStream(of: Void.self)
        let start = ContinuousClock.now
        await #expect(throws: TimedOut.self) {
            try await withBoundedWait(.milliseconds(50)) {
                for await _ in released { break }  // ignores cancellation until released
                return 1
            }
        }
        #expect(ContinuousClock.now - start >= .milliseconds(50))
        release.finish()  // the work ends now, as a dropped query would some day
    }

    @Test("when the time is up, the work is cancelled")
    func workCancelledAtTheLimit() async throws {
        let (cancelled, sawCancellation) = AsyncStream.makeStream(of: Void.self)
        await #expect(throws: TimedOut.self) {
            try await withBoundedWait(.milliseconds(50)) {
                do { try await sleepOnLoop(for: .seconds(90)) } catch { sawCancellation.yield() }
                return 1
            }
        }
        var iterator = cancelled.makeAsyncIterator()
        #expect(await iterator.next() != nil)
    }

    @Test("cancelling the caller cancels the work under way, and the caller gets CancellationError")
    func callerCancelled() async throws {
        let (events, event) = AsyncStream.makeStream(of: String.self)
        let caller = Task {
            try await withBoundedWait(.seconds(90)) {
                event.yield("started")
                do { try await sleepOnLoop(for: .seconds(90)) } catch { event.yield("cancelled") }
                return 1
            }
        }
        var iterator = events.makeAsyncIterator()
        #expect(await iterator.next() == "started")
        caller.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
        #expect(await iterator.next() == "cancelled")
    }

    @Test("a caller cancelled before the work began: CancellationError, and the work never runs")
    func callerCancelledFirst() async throws {
        let ran = Mutex(false)
        let caller = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await withBoundedWait(.seconds(90)) {
                ran.withLock { $0 = true }
                return 1
            }
        }
        await #expect(throws: CancellationError.self) { try await caller.value }
        #expect(!ran.withLock { $0 })
    }
}
