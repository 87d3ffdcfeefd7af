import SQLiteSupport

/// One named change to the checkpoint schema.
struct CheckpointMigration: Sendable {
    let name: String
    let sql: String
}

/// The schema's history: ordered and append-only. Never edit or reorder an entry that has shipped;
/// add a new one. Each is applied once, in its own write transaction, and recorded by name in
/// `schema_migrations`.
///
/// Times are REAL seconds since 1970 (UTC), so `sqlite3` users can read them with
/// `datetime(col, 'unixepoch')` and comparisons are numeric.
let checkpointMigrations: [CheckpointMigration] = [
    CheckpointMigration(
        name: "v1-steps-bundles-runs",
        sql: """
            CREATE TABLE steps (
                session_id          TEXT NOT NULL,
                step_key            TEXT NOT NULL,
                idempotency_key     TEXT NOT NULL,
                request_fingerprint TEXT NOT NULL,
                content_digest      TEXT NOT NULL,
                state               TEXT NOT NULL CHECK (state IN ('sent', 'done')),
                server_id           INTEGER,
                sent_at             REAL NOT NULL,
                done_at             REAL,
                bundle_name         TEXT,
                PRIMARY KEY (session_id, step_key),
                CHECK ((state = 'done') = (server_id IS NOT NULL))
            );
            CREATE TABLE bundles (
                name                   TEXT PRIMARY KEY,
                session_id             TEXT,
                attempts               INTEGER NOT NULL DEFAULT 0,
                first_seen             REAL NOT NULL,
                next_attempt_at        REAL,
                last_error_reason      TEXT,
                last_error_step        TEXT,
                last_error_http_status INTEGER,
                last_error_message     TEXT,
                last_outcome           TEXT,
                updated_at             REAL NOT NULL,
                steps_done             INTEGER NOT NULL DEFAULT 0,
                steps_total            INTEGER
            );
            CREATE INDEX bundles_by_session ON bundles (session_id);
            CREATE INDEX bundles_by_outcome ON bundles (last_outcome);
            CREATE TABLE claims (
                bundle_name TEXT PRIMARY KEY,
                run_id      TEXT NOT NULL,
                host        TEXT NOT NULL,
                pid         INTEGER NOT NULL,
                claimed_at  REAL NOT NULL
            );
            CREATE TABLE runs (
                run_id      TEXT PRIMARY KEY,
                host        TEXT NOT NULL,
                pid         INTEGER NOT NULL,
                started_at  REAL NOT NULL,
                finished_at REAL,
                claimed     INTEGER,
                done        INTEGER,
                deferred    INTEGER,
                failed      INTEGER,
                requests    INTEGER,
                bytes       INTEGER,
                seconds     REAL,
                exit_code   INTEGER
            );
            CREATE INDEX runs_by_start ON runs (started_at);
            """),
    // Whether a run shows the API working (see `CheckpointStore.recordRunFinished`); NULL: not judged.
    CheckpointMigration(
        name: "v2-runs-healthy",
        sql: """
            ALTER TABLE runs ADD COLUMN healthy INTEGER;
            """),
    // A bundle being read (validated) since when, and how many readings of it never ended: the
    // process crashed, ran out of memory or was killed while reading it (`beginReading`).
    CheckpointMigration(
        name: "v3-bundles-reading",
        sql: """
            ALTER TABLE bundles ADD COLUMN reading_since REAL;
            ALTER TABLE bundles ADD COLUMN readings_cut_short INTEGER NOT NULL DEFAULT 0;
            """),
    // Whether the API answered the session lookups in that run (1), lacked them (0), or was never
    // asked (NULL): which guarantee of exactly once holds against it (`dopesync status`).
    CheckpointMigration(
        name: "v4-runs-api-lookups",
        sql: """
            ALTER TABLE runs ADD COLUMN api_lookups INTEGER;
            """),
]

enum CheckpointMigrator {
    /// Applies every migration the database lacks. Safe when several processes open at once: each
    /// migration runs in a `BEGIN IMMEDIATE` transaction (under the cross-process write lock) that
    /// checks again whether it was applied, so the second opener finds it done and skips it.
    static func migrate(_ database: SQLiteDatabase, migrations: [CheckpointMigration], now: Double) throws {
        // A read first: an up-to-date database (the usual case) opens without taking the write lock.
        let applied = try appliedNames(database)
        let known = Set(migrations.map(\.name))
        if let unknown = applied.first(where: { !known.contains($0) }) {
            throw CheckpointError(
                code: .schemaTooNew,
                message:
                    "\(database.path) has migration \"\(unknown)\", unknown to this dopesync \(DopeSyncInfo.version): a newer version wrote it; upgrade dopesync"
            )
        }
        for migration in migrations where !applied.contains(migration.name) {
            try database.write { connection in
                try connection.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
                let done =
                    try connection.queryFirst("SELECT 1 FROM schema_migrations WHERE name = ?", [migration.name]) != nil
                guard !done else { return }
                try connection.execute(migration.sql)
                try connection.query(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)", [migration.name, now])
            }
        }
    }

    static func appliedNames(_ database: SQLiteDatabase) throws -> Set<String> {
        try database.read { connection in
            let exists =
                try connection.queryFirst(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'") != nil
            guard exists else { return [] }
            return Set(try connection.query("SELECT name FROM schema_migrations").compactMap { $0.string(0) })
        }
    }
}
