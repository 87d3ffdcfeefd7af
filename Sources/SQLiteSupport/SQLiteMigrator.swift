/// One named change to a schema. A program's list of them is ordered and append-only: never edit
/// or reorder an entry that has shipped; add a new one.
public struct SQLiteMigration: Sendable {
    public let name: String
    public let sql: String

    public init(name: String, sql: String) {
        self.name = name
        self.sql = sql
    }
}

/// Applies migrations, each once, recorded by name in `schema_migrations (name, applied_at)`: the
/// one mechanism of the checkpoint store and the dev server.
public enum SQLiteMigrator {
    /// The database records a migration the list does not have: a newer program wrote it.
    public struct UnknownMigration: Error, Sendable {
        public let name: String
    }

    /// Applies every migration the database lacks, each in its own `BEGIN IMMEDIATE` transaction
    /// (under the cross-process write lock, when the database has one) that checks again whether
    /// it was applied: of several processes opening a new database at once, one applies it and the
    /// others skip it. `now` is recorded as `applied_at` (seconds since 1970).
    ///
    /// Throws ``UnknownMigration`` before changing anything when the database is newer than `migrations`.
    public static func migrate(_ database: SQLiteDatabase, _ migrations: [SQLiteMigration], now: Double) throws {
        // A read first: an up-to-date database (the usual case) opens without taking the write lock.
        let applied = try appliedNames(database)
        let known = Set(migrations.map(\.name))
        if let unknown = applied.first(where: { !known.contains($0) }) { throw UnknownMigration(name: unknown) }
        for migration in migrations where !applied.contains(migration.name) {
            try database.write { connection in
                try connection.execute(createTable)
                let done =
                    try connection.queryFirst("SELECT 1 FROM schema_migrations WHERE name = ?", [migration.name]) != nil
                guard !done else { return }
                try connection.execute(migration.sql)
                try record(migration.name, in: connection, now: now)
            }
        }
    }

    /// Records `names` as applied without running them: for a database whose schema was made
    /// before it recorded migrations by name (it counted them in `PRAGMA user_version`).
    public static func adopt(_ names: [String], in database: SQLiteDatabase, now: Double) throws {
        try database.write { connection in
            try connection.execute(createTable)
            for name in names {
                try connection.query(
                    "INSERT OR IGNORE INTO schema_migrations (name, applied_at) VALUES (?, ?)", [name, now])
            }
        }
    }

    /// The names of the migrations applied, in the order they were applied. Not by `applied_at`:
    /// that is the opener's clock when it started, and of two processes opening at once the
    /// later-started one may apply first.
    public static func appliedNames(_ database: SQLiteDatabase) throws -> [String] {
        try database.read { connection in
            let exists =
                try connection.queryFirst(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'") != nil
            guard exists else { return [] }
            return try connection.query("SELECT name FROM schema_migrations ORDER BY rowid").map {
                row throws(SQLiteError) in
                try row["name"]
            }
        }
    }

    private static let createTable =
        "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"

    private static func record(_ name: String, in connection: SQLiteConnection, now: Double) throws(SQLiteError) {
        try connection.query("INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)", [name, now])
    }
}
