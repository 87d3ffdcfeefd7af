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
}
