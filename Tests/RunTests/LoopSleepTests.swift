import DopeSyncSupport
import Testing

@testable import DopeSync

/// ``sleepOnLoop(for:)``, the run's `Task.sleep` on NIO's loops: it waits its time, no less, and a
/// cancellation ends it with `CancellationError`. (A cancellation while it waits, at once or
/// racing its start, is ``StopRequest``'s: `StopRequestTests`.) A sleep that missed its
/// cancellation would hold a retry's slot or a stopping run for its whole time.
@Suite(.timeLimit(.minutes(3))) struct LoopSleepTests {
    @Test("a sleep lasts its time, then returns")
    func lastsItsTime() async throws {
        let start = ContinuousClock.now
        try await sleepOnLoop(for: .milliseconds(30))
        #expect(ContinuousClock.now - start >= .milliseconds(30))
    }

    @Test("200 sleeps cancelled as they begin: each ends, whichever comes first")
    func cancelledInEitherOrder() async {
        await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<200 {
                let sleeper = Task { try await sleepOnLoop(for: .seconds(90)) }
                sleeper.cancel()
                group.addTask { (try? await sleeper.value) == nil }
            }
            for await threw in group { #expect(threw) }
        }
    }
}
