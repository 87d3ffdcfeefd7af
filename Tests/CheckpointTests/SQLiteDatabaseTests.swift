import Foundation
import SQLiteSupport
import Testing

@Suite struct SQLiteDatabaseTests {
    @Test func aWriteTransactionCommitsAllOrNothing() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var options = SQLiteOptions()
        options.writeLockPath = directory.appendingPathComponent("db.lock").path
        let database = try SQLiteDatabase(path: directory.appendingPathComponent("db.sqlite").path, options: options)
        try database.write { try $0.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)") }
        _ = try database.write { try $0.query("INSERT INTO t (name) VALUES (?)", ["a"]) }
        #expect(throws: SQLiteError.self) {
            try database.write { connection in
                try connection.query("INSERT INTO t (name) VALUES (?)", ["b"])
                try connection.query("INSERT INTO t (name) VALUES (?)", ["a"])  // UNIQUE fails: b must roll back
            }
        }
        let names = try database.read { try $0.query("SELECT name FROM t ORDER BY id").compactMap { $0.string(0) } }
        #expect(names == ["a"])
        let mode = try database.read { try $0.queryFirst("PRAGMA journal_mode")?.string(0) }
        #expect(mode == "wal")
    }

    @Test(
        "a write waits for another holder of the write lock no longer than the busy timeout, then fails as busy and leaves nothing half-written"
    )
    func aHeldWriteLockFailsAsBusyAfterTheTimeout() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var options = SQLiteOptions()
        options.writeLockPath = directory.appendingPathComponent("db.lock").path
        options.busyTimeoutMilliseconds = 200
        let database = try SQLiteDatabase(path: directory.appendingPathComponent("db.sqlite").path, options: options)
        try database.write { try $0.execute("CREATE TABLE t (name TEXT)") }

        // Another holder (a second open file description conflicts like another process would),
        // stopped while it holds the lock.
        let holder = open(options.writeLockPath!, O_RDWR | O_CLOEXEC)
        #expect(flock(holder, LOCK_EX) == 0)
        let started = ContinuousClock.now
        let error = #expect(throws: SQLiteError.self) {
            try database.write { _ = try $0.query("INSERT INTO t VALUES ('lost')") }
        }
        let waited = ContinuousClock.now - started
        #expect(error?.code == .busy)
        #expect(
            error?.message.contains("db.lock") == true, "the error names the lock file: \(String(describing: error))")
        #expect(waited >= .milliseconds(200) && waited < .seconds(5), "waited \(waited)")

        // Once it lets go, writes go through again.
        close(holder)
        _ = try database.write { try $0.query("INSERT INTO t VALUES ('kept')") }
        let names = try database.read { try $0.query("SELECT name FROM t").compactMap { $0.string(0) } }
        #expect(names == ["kept"])
    }
}
