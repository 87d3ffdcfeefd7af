import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport
import Foundation
import Logging
import NIOPosix
import PostgresNIO

/// The shared store's schema: the tables of the SQLite file, in a schema of their own
/// (`dopesync`), plus the claims as leases. Named migrations, ordered and append-only, recorded
/// in `dopesync.schema_migrations`.
package enum PostgresSchema {
    package struct Migration {
        package let name: String
        package let sql: [String]
    }

    /// Times are seconds since 1970 (`double precision`), as in the SQLite file.
    package static let migrations: [Migration] = [
        Migration(
            name: "v1-shared-store",
            sql: [
                """
                CREATE TABLE dopesync.steps (
                    session_id          text NOT NULL,
                    step_key            text NOT NULL,
                    idempotency_key     text NOT NULL,
                    request_fingerprint text NOT NULL,
                    content_digest      text NOT NULL,
                    state               text NOT NULL CHECK (state IN ('sent', 'done')),
                    server_id           bigint,
                    sent_at             double precision NOT NULL,
                    done_at             double precision,
                    bundle_name         text,
                    PRIMARY KEY (session_id, step_key),
                    CHECK ((state = 'done') = (server_id IS NOT NULL))
                )
                """,
                """
                CREATE TABLE dopesync.bundles (
                    name                   text PRIMARY KEY,
                    session_id             text,
                    attempts               integer NOT NULL DEFAULT 0,
                    first_seen             double precision NOT NULL,
                    next_attempt_at        double precision,
                    last_error_reason      text,
                    last_error_step        text,
                    last_error_http_status integer,
                    last_error_message     text,
                    last_error_field       text,
                    last_outcome           text,
                    updated_at             double precision NOT NULL,
                    steps_done             integer NOT NULL DEFAULT 0,
                    steps_total            integer,
                    reading_since          double precision,
                    readings_cut_short     integer NOT NULL DEFAULT 0
                )
                """,
                "CREATE INDEX bundles_by_session ON dopesync.bundles (session_id)",
                "CREATE INDEX bundles_by_outcome ON dopesync.bundles (last_outcome)",
                // One row per bundle name ever claimed, kept after the claim ends so that its
                // epoch only grows. Held while run_id is set; expired once lease_expires_at,
                // on the database's clock, has passed.
                """
                CREATE TABLE dopesync.claims (
                    bundle_name      text PRIMARY KEY,
                    epoch            bigint NOT NULL,
                    run_id           text,
                    host             text,
                    pid              integer,
                    claimed_at       double precision,
                    renewed_at       double precision,
                    lease_expires_at double precision
                )
                """,
                "CREATE INDEX claims_held ON dopesync.claims (run_id) WHERE run_id IS NOT NULL",
                """
                CREATE TABLE dopesync.runs (
                    run_id      text PRIMARY KEY,
                    host        text NOT NULL,
                    pid         integer NOT NULL,
                    started_at  double precision NOT NULL,
                    finished_at double precision,
                    claimed     integer,
                    done        integer,
                    deferred    integer,
                    failed      integer,
                    requests    integer,
                    bytes       bigint,
                    seconds     double precision,
                    exit_code   integer,
                    healthy     boolean,
                    api_lookups boolean
                )
                """,
                "CREATE INDEX runs_by_start ON dopesync.runs (started_at)",
                """
                CREATE TABLE dopesync.reference_lists (
                    name    text PRIMARY KEY,
                    etag    text,
                    body    bytea NOT NULL,
                    read_at double precision NOT NULL
                )
                """,
            ]),
        // A bundle's steps done are counted from its session's steps when read, not kept in a
        // column that every step's result had to update (as in the SQLite file, v6).
        Migration(
            name: "v2-bundles-steps-done-counted",
            sql: ["ALTER TABLE dopesync.bundles DROP COLUMN steps_done"]),
        // What the checkpoints are bound to, as in the SQLite file (v7): the store's own id, each
        // session's API and producer, each API base URL a run used.
        Migration(
            name: "v3-bindings",
            sql: [
                "CREATE TABLE dopesync.store_meta (key text PRIMARY KEY, value text NOT NULL)",
                "INSERT INTO dopesync.store_meta (key, value) VALUES ('store_id', replace(gen_random_uuid()::text, '-', ''))",
                """
                CREATE TABLE dopesync.sessions (
                    session_id text PRIMARY KEY,
                    api        text,
                    owner_uid  bigint,
                    owner_name text,
                    first_seen double precision
                )
                """,
                "INSERT INTO dopesync.sessions (session_id) SELECT DISTINCT session_id FROM dopesync.steps",
                "CREATE INDEX sessions_by_api ON dopesync.sessions (api)",
                """
                CREATE TABLE dopesync.api_addresses (
                    url text PRIMARY KEY, api text NOT NULL, recorded_at double precision NOT NULL
                )
                """,
            ]),
        // A first sight made under a clock not synchronized, on the boot's own clock as well, as in
        // the SQLite file (v8). The stamp names its host and boot: another's counts by the wall clock.
        Migration(
            name: "v4-bundles-first-seen-on-boot",
            sql: ["ALTER TABLE dopesync.bundles ADD COLUMN first_seen_boot text"]),
    ]

    /// An arbitrary constant for `pg_advisory_xact_lock`: "dopesync" in ASCII.
    static let migrationLock: Int64 = 0x646f_7065_7379_6e63

    /// Connects once (no pool), applies what the database lacks, and disconnects. A database
    /// that a newer dopesync migrated is `CheckpointError/Code/schemaTooNew`.
    static func migrate(_ settings: DatabaseSettings, timeout: Duration, logger: Logger) async throws(CheckpointError) {
        try await withConnection(settings, timeout: timeout, logger: logger) { connection in
            try await apply(on: connection, logger: logger)
        }
    }

    /// `body` on one connection of its own (no pool), closed after it whatever it did, all within
    /// `timeout`; any failure as a `CheckpointError`.
    private static func withConnection<Value: Sendable>(
        _ settings: DatabaseSettings, timeout: Duration, logger: Logger,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Value
    ) async throws(CheckpointError) -> Value {
        do {
            return try await PostgresCheckpoints.withTimeout(timeout) {
                let connection = try await PostgresConnection.connect(
                    on: MultiThreadedEventLoopGroup.singleton.any(),
                    configuration: connectionConfiguration(settings, statementTimeout: timeout), id: 0, logger: logger)
                do {
                    let value = try await body(connection)
                    try? await connection.close()
                    return value
                } catch {
                    try? await connection.close()
                    throw error
                }
            }
        } catch let error as CheckpointError {
            throw error
        } catch {
            throw PostgresCheckpoints.checkpointError(error, settings: settings, doing: "connecting")
        }
    }

    /// What `check` finds in the database, read without changing anything (a run would migrate).
    package struct Found: Sendable {
        /// The migrations applied, in order; empty when there is no schema yet.
        package var applied: [String]
        /// The store's id (`store_meta`), once the schema has it.
        package var storeID: String?

        /// Migrations this dopesync knows that the database lacks: the next run applies them.
        package var missing: [String] { migrations.map(\.name).filter { !applied.contains($0) } }
        /// A migration this dopesync does not know: a newer version wrote it.
        package var tooNew: CheckpointError? { PostgresSchema.tooNew(applied) }
    }

    /// Connects, authenticates and reads the applied migrations and the store's id, in one
    /// read-only transaction: `check` reports a database as a run would find it, and changes
    /// nothing in it.
    package static func inspect(_ settings: DatabaseSettings, timeout: Duration, logger: Logger)
        async throws(CheckpointError)
        -> Found
    {
        try await withConnection(settings, timeout: timeout, logger: logger) { connection in
            _ = try await connection.query("BEGIN TRANSACTION READ ONLY", logger: logger)
            let found = try await read(on: connection, logger: logger)
            _ = try await connection.query("COMMIT", logger: logger)
            return found
        }
    }

    /// ``inspect(_:timeout:logger:)``'s queries, on its connection.
    private static func read(on connection: PostgresConnection, logger: Logger) async throws -> Found {
        var found = Found(applied: [], storeID: nil)
        let tables = try await connection.query(
            """
            SELECT to_regclass('dopesync.schema_migrations') IS NOT NULL AS migrations,
                   to_regclass('dopesync.store_meta') IS NOT NULL AS meta
            """, logger: logger)
        var (hasMigrations, hasMeta) = (false, false)
        for try await (migrations, meta) in tables.decode((Bool, Bool).self) {
            (hasMigrations, hasMeta) = (migrations, meta)
        }
        if hasMigrations { found.applied = try await appliedMigrations(on: connection, logger: logger) }
        if hasMeta {
            for try await id in try await connection.query(
                "SELECT value FROM dopesync.store_meta WHERE key = 'store_id'", logger: logger
            ).decode(String.self) {
                found.storeID = id
            }
        }
        return found
    }

    static func connectionConfiguration(_ settings: DatabaseSettings, statementTimeout: Duration)
        -> PostgresConnection.Configuration
    {
        let tls: PostgresConnection.Configuration.TLS =
            switch settings.tls {
            case .disable: .disable
            case .prefer: .prefer(try! .init(configuration: PostgresCheckpoints.unverifiedTLS))
            case .verifyFull: .require(try! .init(configuration: .makeClientConfiguration()))
            }
        var configuration = PostgresConnection.Configuration(
            host: settings.host, port: settings.port, username: settings.user, password: settings.password,
            database: settings.database, tls: tls)
        configuration.options.additionalStartupParameters = PostgresCheckpoints.sessionSettings(
            settings, statementTimeout: statementTimeout)
        return configuration
    }

    /// All in one transaction under the advisory lock: two hosts starting at once migrate once,
    /// and a migration that fails leaves nothing half done.
    private static func apply(on connection: PostgresConnection, logger: Logger) async throws {
        _ = try await connection.query("BEGIN", logger: logger)
        do {
            _ = try await connection.query("SELECT pg_advisory_xact_lock(\(migrationLock))", logger: logger)
            _ = try await connection.query("CREATE SCHEMA IF NOT EXISTS dopesync", logger: logger)
            _ = try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS dopesync.schema_migrations (
                    name text PRIMARY KEY, applied_at double precision NOT NULL
                )
                """, logger: logger)
            let applied = try await appliedMigrations(on: connection, logger: logger)
            if let tooNew = tooNew(applied) { throw tooNew }
            let now = Date().timeIntervalSince1970
            for migration in migrations where !applied.contains(migration.name) {
                for statement in migration.sql {
                    _ = try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                _ = try await connection.query(
                    "INSERT INTO dopesync.schema_migrations (name, applied_at) VALUES (\(migration.name), \(now))",
                    logger: logger)
            }
            _ = try await connection.query("COMMIT", logger: logger)
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }

    /// The migrations the database records, in the order they were applied.
    private static func appliedMigrations(on connection: PostgresConnection, logger: Logger) async throws -> [String] {
        var applied: [String] = []
        for try await name in try await connection.query(
            "SELECT name FROM dopesync.schema_migrations ORDER BY applied_at, name", logger: logger
        ).decode(String.self) {
            applied.append(name)
        }
        return applied
    }

    /// `CheckpointError/Code/schemaTooNew` when `applied` holds a migration this dopesync does
    /// not know: a newer version wrote it.
    static func tooNew(_ applied: [String]) -> CheckpointError? {
        guard let unknown = applied.first(where: { name in !migrations.contains { $0.name == name } }) else {
            return nil
        }
        return CheckpointError(
            code: .schemaTooNew,
            message:
                "the database has migration \"\(unknown)\", unknown to this dopesync \(DopeSyncInfo.version): "
                + "a newer version wrote it; upgrade dopesync on this host")
    }
}
