import DopeSyncTestSupport
import Foundation
import Synchronization
import Testing

@testable import DopeSync

/// ``CheckpointWriter``: the run's one way to its store, on a thread of its own.
@Suite struct CheckpointWriterTests {
    @Test(
        "work asked for just before the scope ends runs, and so does work it asks for in turn: none is dropped at shutdown"
    )
    func queuedWorkRunsBeforeTheScopeEnds() async throws {
        let folder = try TemporaryFolder("checkpoint-writer")
        let store = try CheckpointStore(path: folder.sub("dopesync.sqlite"))
        let ran = Mutex<[String]>([])
        await CheckpointWriter.with(store) { writer in
            for index in 0..<50 {
                writer.submit { store in
                    ran.withLock { $0.append(store == nil ? "cancelled \(index)" : "ran \(index)") }
                    guard index == 49 else { return }
                    // A call that asks for another, as a commit starts the next batch.
                    writer.submit { store in ran.withLock { $0.append(store == nil ? "cancelled next" : "ran next") } }
                }
            }
        }
        #expect(ran.withLock { $0 } == (0..<50).map { "ran \($0)" } + ["ran next"])
    }
}
