import DopeSyncTestSupport
import Foundation
import Testing

/// Swift Testing ends a test past its time limit by cancelling it, then waits for its body to
/// return. A body waiting for a child that never ends (held in a stalled file system, behind a
/// lock) would hold the suite, and CI, for good: a cancelled wait ends the child instead.
@Suite struct CancelledChildWaitTests {
    @Test("a cancelled wait for a child ends the child (SIGKILL) and returns its status")
    func aCancelledWaitEndsTheChild() async throws {
        let child = try await Spawned("/bin/sleep", ["600"])
        let waiting = Task { await child.finished() }
        waiting.cancel()
        #expect(await waiting.value == 128 + SIGKILL)
    }

    @Test("a wait that is not cancelled leaves the child alone")
    func anUncancelledWaitWaits() async throws {
        let child = try await Spawned("/bin/sh", ["-c", "read line; exit 3"])
        let waiting = Task { await child.finished() }
        try child.send("go")
        #expect(await waiting.value == 3)
    }
}
