import DopeSyncTestSupport
import Foundation
import SQLiteSupport
import Testing

@testable import DopeSyncStore

/// `status` as another user than the worker's reads a private copy of the checkpoint file and its
/// WAL (``CheckpointStore/init(readingSnapshotOf:)``), often while a run writes and checkpoints.
@Suite struct SnapshotWhileWritingTests {
    @Test(
        "a copy taken while a run commits and checkpoints reads as one moment: whole transactions, never a torn file",
        .timeLimit(minutes: 2))
    func aSnapshotIsNeverTorn() async throws {
        let folder = try TemporaryFolder("snapshot")
        let path = folder.sub("dopesync.sqlite")
        // The run: transactions of 20 rows each, on 1 KiB pages, with the WAL checkpointed back
        // into the file and restarted every few commits, as a busy run's autocheckpoint does. Its
        // table is there before the first copy.
        let database = try await onOwnThread { () throws -> SQLiteDatabase in
            var options = SQLiteOptions()
            options.pageSizeOfNewDatabase = 1024
            let database = try SQLiteDatabase(path: path, options: options)
            try database.write { try $0.execute("CREATE TABLE rows (batch INTEGER, filler TEXT)") }
            return database
        }
        let ((problems, read), batches) = try await race { () throws -> ([String], Int) in
            var problems: [String] = []
            var read = 0
            let giveUp = ContinuousClock.now + .seconds(30)
            // Two seconds of copies, however many fit (alone about 150, fewer beside the suite's
            // other tests, whose load must not make this one slow), and at least one read whole.
            let end = ContinuousClock.now + .seconds(2)
            while ContinuousClock.now < end || (read == 0 && ContinuousClock.now < giveUp) {
                do {
                    let snapshot = try CheckpointStore(readingSnapshotOf: path)
                    let counts = try snapshot.read("counting") { connection in
                        try connection.query("SELECT batch, count(*) AS n FROM rows GROUP BY batch").map {
                            (try $0["batch"] as Int, try $0["n"] as Int)
                        }
                    }
                    problems += counts.filter { $0.1 != 20 }.map { "batch \($0.0) has \($0.1) rows" }
                    let check: String = try snapshot.read("checking") {
                        try $0.queryFirst("PRAGMA quick_check")!["quick_check"]
                    }
                    if check != "ok" { problems.append(check) }
                    read += 1
                } catch let error as CheckpointError where error.code == .busy {
                    // Checkpointed under every try: refused in words, never read torn.
                } catch {
                    problems.append("\(error)")
                }
            }
            return (problems, read)
        } alongside: { isOver in
            var batch = 0
            while !isOver() {
                batch += 1
                try database.write { connection in
                    for _ in 0..<20 {
                        try connection.query(
                            "INSERT INTO rows (batch, filler) VALUES (?, ?)",
                            [batch, String(repeating: "x", count: 300)])
                    }
                    if batch % 40 == 0 { try connection.execute("DELETE FROM rows WHERE batch < \(batch - 20)") }
                }
                usleep(200)  // a busy run's pace, not a core of the suite's
                if batch % 2 == 0 { try database.read { _ = try $0.query("PRAGMA wal_checkpoint(RESTART)") } }
            }
            database.close()
            return batch
        }
        #expect(batches > 20, "the writer wrote while the copies were taken")
        #expect(problems.isEmpty, "\(problems.count) torn copies: \(problems.prefix(3))")
        #expect(read > 0, "every copy was refused as busy")
    }
}
