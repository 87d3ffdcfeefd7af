import DopeSyncBundle
import DopeSyncSupport
import SQLiteSupport

/// The checkpoint schema's history: ordered and append-only (``SQLiteMigrator`` applies each once,
/// in its own write transaction, and records it by name in `schema_migrations`).
///
/// Times are REAL seconds since 1970 (UTC), so `sqlite3` users can read them with
/// `datetime(col, 'unixepoch')` and comparisons are numeric.
let checkpointMigrations: [SQLiteMigration] = [
    SQLiteMigration(
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
    SQLiteMigration(
        name: "v2-runs-healthy",
        sql: """
            ALTER TABLE runs ADD COLUMN healthy INTEGER;
            """),
    // A bundle being read (validated) since when, and how many readings of it never ended: the
    // process crashed, ran out of memory or was killed while reading it (`beginReading`).
    SQLiteMigration(
        name: "v3-bundles-reading",
        sql: """
            ALTER TABLE bundles ADD COLUMN reading_since REAL;
            ALTER TABLE bundles ADD COLUMN readings_cut_short INTEGER NOT NULL DEFAULT 0;
            """),
    // Whether the API answered the session lookups in that run (1), lacked them (0), or was never
    // asked (NULL): which guarantee of exactly once holds against it (`dopesync status`).
    SQLiteMigration(
        name: "v4-runs-api-lookups",
        sql: """
            ALTER TABLE runs ADD COLUMN api_lookups INTEGER;
            """),
    // The bundle's field at fault (a sidecar's `field:` line), and the server's reference lists
    // as last read, with their ETags: revalidated with If-None-Match once per run.
    SQLiteMigration(
        name: "v5-reference-lists",
        sql: """
            ALTER TABLE bundles ADD COLUMN last_error_field TEXT;
            CREATE TABLE reference_lists (
                name TEXT PRIMARY KEY,
                etag TEXT,
                body BLOB NOT NULL,
                read_at REAL NOT NULL
            );
            """),
    // A bundle's steps done are counted from its session's steps when read, not kept in a column
    // that every step's result had to update.
    SQLiteMigration(
        name: "v6-bundles-steps-done-counted",
        sql: """
            ALTER TABLE bundles DROP COLUMN steps_done;
            """),
    // What the checkpoints are bound to. `store_meta`: this store's own id, which a spool's
    // binding file names (`SpoolBinding`), and, once `migrate` moved the spool to PostgreSQL,
    // where to (`moved_to`: the file is then refused). `sessions`: each session's API (the one
    // its steps were recorded against) and its producer (the owner of the bundle that first sent
    // it); sessions from before are listed with neither, for the next run and bundle to adopt.
    // `api_addresses`: each API base URL a run used, and which API it is (itself, or an earlier
    // URL of the same API, as the operator said with `dopesync api --same-as`).
    SQLiteMigration(
        name: "v7-bindings",
        sql: """
            CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            INSERT INTO store_meta (key, value) VALUES ('store_id', lower(hex(randomblob(16))));
            CREATE TABLE sessions (
                session_id TEXT PRIMARY KEY,
                api        TEXT,
                owner_uid  INTEGER,
                owner_name TEXT,
                first_seen REAL
            );
            INSERT INTO sessions (session_id) SELECT DISTINCT session_id FROM steps;
            CREATE INDEX sessions_by_api ON sessions (api);
            CREATE TABLE api_addresses (url TEXT PRIMARY KEY, api TEXT NOT NULL, recorded_at REAL NOT NULL);
            """),
    // A first sight made while the wall clock was not synchronized, on the boot's own clock as
    // well (`HOST/BOOTID@SECONDS`, ``BootInstant``): the first deferral under a synchronized clock
    // on that boot dates `first_seen` again by it, and clears it (``DeferralPolicy``). NULL for a
    // sight under a synchronized clock, for rows from before, and where there is no boot id.
    SQLiteMigration(
        name: "v8-bundles-first-seen-on-boot",
        sql: """
            ALTER TABLE bundles ADD COLUMN first_seen_boot TEXT;
            """),
]

package enum CheckpointMigrator {
    /// Applies what the database lacks (``SQLiteMigrator``); a database a newer dopesync migrated
    /// is ``CheckpointError/Code/schemaTooNew``, before anything changes.
    static func migrate(_ database: SQLiteDatabase, migrations: [SQLiteMigration], now: Double) throws {
        do {
            try SQLiteMigrator.migrate(database, migrations, now: now)
        } catch let error as SQLiteMigrator.UnknownMigration {
            throw CheckpointError(
                code: .schemaTooNew,
                message:
                    "\(database.path) has migration \"\(error.name)\", unknown to this dopesync \(DopeSyncInfo.version): a newer version wrote it; upgrade dopesync"
            )
        }
    }
}
