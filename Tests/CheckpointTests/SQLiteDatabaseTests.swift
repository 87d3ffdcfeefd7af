import DopeSyncTestSupport
import Foundation
import SQLiteSupport
import Testing

@Suite struct SQLiteDatabaseTests {
    @Test(
        "columns are read by name and type: a missing column, a NULL where a value is required, another type, each an error naming the column"
    )
    func columnsByNameFailLoudly() throws {
        let database = try SQLiteDatabase(path: ":memory:")
        let row = try #require(
            try database.read { try $0.queryFirst("SELECT 7 AS n, NULL AS missing, 'x' AS word, 2.5 AS real") })
        #expect(try row["n"] as Int == 7)
        #expect(try row["n"] as Double == 7, "an integer is a number")
        #expect(try row["missing"] as Int? == nil, "NULL is nil only where nil is allowed")
        #expect(try row["word"] as String == "x")
        #expect(try row["real"] as Double == 2.5)
        /// The message of reading `column` as an Int.
        func failure(_ column: String) -> String {
            do {
                _ = try row[column] as Int
                return "no error"
            } catch {
                return error.message
            }
        }
        #expect(failure("nope").contains("no column nope"))
        #expect(failure("missing") == "column missing is NULL, not an integer")
        #expect(failure("word") == "column word is text, not an integer")
        #expect(failure("real") == "column real is the real 2.5, not an integer")
    }

    @Test func aWriteTransactionCommitsAllOrNothing() throws {
        let folder = try TemporaryFolder("sqlite")
        let directory = folder.url
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
        let names: [String] = try database.read {
            try $0.query("SELECT name FROM t ORDER BY id").map { try $0["name"] }
        }
        #expect(names == ["a"])
        let mode: String? = try database.read { try $0.queryFirst("PRAGMA journal_mode")?["journal_mode"] }
        #expect(mode == "wal")
    }

    @Test(
        "a new file gets the page size asked for; a file made before keeps its own, in WAL or rollback mode; the WAL checkpoint interval is in bytes of the file's pages"
    )
    func pageSizeOfNewFilesAndCheckpointIntervalInBytes() throws {
        let folder = try TemporaryFolder("sqlite")
        var options = SQLiteOptions()
        options.pageSizeOfNewDatabase = 1024
        options.walAutocheckpointBytes = 4 << 20
        func pragmas(_ database: SQLiteDatabase) throws -> (pageSize: Int?, checkpointPages: Int?) {
            try database.read {
                (
                    try $0.queryFirst("PRAGMA page_size")?["page_size"],
                    try $0.queryFirst("PRAGMA wal_autocheckpoint")?["wal_autocheckpoint"]
                )
            }
        }

        let new = try SQLiteDatabase(path: folder.sub("new.sqlite"), options: options)
        try new.write { try $0.execute("CREATE TABLE t (x)") }
        #expect(try pragmas(new) == (1024, 4096))

        var rollback = SQLiteOptions()
        rollback.walJournal = false
        for (name, earlier) in [("wal.sqlite", SQLiteOptions()), ("rollback.sqlite", rollback)] {
            let path = folder.sub(name)
            let before = try SQLiteDatabase(path: path, options: earlier)
            try before.write { try $0.execute("CREATE TABLE t (x)") }
            let pageSize = try #require(try pragmas(before).pageSize)
            #expect(pageSize != 1024, "SQLite's default page size, not the one asked for later")
            let reopened = try SQLiteDatabase(path: path, options: options)
            try reopened.write { try $0.execute("INSERT INTO t VALUES (1)") }
            #expect(try pragmas(reopened) == (pageSize, (4 << 20) / pageSize), "\(name)")
        }
    }

    @Test(
        "a write waits for another holder of the write lock no longer than the busy timeout, then fails as busy and leaves nothing half-written"
    )
    func aHeldWriteLockFailsAsBusyAfterTheTimeout() throws {
        let folder = try TemporaryFolder("sqlite")
        let directory = folder.url
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

        // Once it lets go, writes go through again. Unlocked, not only closed: a child another test
        // is starting at that moment holds a copy of the descriptor until it runs exec, and with it
        // the lock, and the write after a wait ran out tries the lock once.
        flock(holder, LOCK_UN)
        close(holder)
        _ = try database.write { try $0.query("INSERT INTO t VALUES ('kept')") }
        let names: [String] = try database.read { try $0.query("SELECT name FROM t").map { try $0["name"] } }
        #expect(names == ["kept"])
    }
}
