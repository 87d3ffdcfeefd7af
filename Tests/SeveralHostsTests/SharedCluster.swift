import DopeSync
import DopeSyncTestSupport
import Foundation
import Testing

/// One PostgreSQL server for the suites that do not stop it, each test in a database of its own;
/// the watchdog of ``PostgresCluster`` removes it when the test process ends.
enum SharedCluster {
    /// Started by the first test that asks (a static's initializer cannot await: it starts the
    /// task that does), awaited by every one.
    private static let started = Task { try await PostgresCluster.start() }

    /// A new, empty database in the shared server.
    static func freshDatabase() async throws -> SharedDatabase {
        try await SharedDatabase.fresh(in: started.value)
    }
}

/// Blocks until no claim is held with time left on the database's clock (the deadline each
/// worker's own clock reaches first): one statement that sleeps inside the server until the
/// latest lease's deadline, and again until the new one if a renewal moved it meanwhile.
func waitUntilEveryLeaseHasRunOut(_ database: SharedDatabase) async throws {
    try await database.psql(
        """
        DO $$ DECLARE time_left double precision; BEGIN
          LOOP
            SELECT max(lease_expires_at) - extract(epoch FROM clock_timestamp()) INTO time_left
              FROM dopesync.claims WHERE run_id IS NOT NULL;
            EXIT WHEN time_left IS NULL OR time_left <= 0;
            PERFORM pg_sleep(time_left);
          END LOOP;
        END $$
        """)
}

/// Asks `database` `question` (a query of one boolean) until it answers true, a minute at most,
/// inside the server as ``waitUntilEveryLeaseHasRunOut(_:)`` waits: one psql, not one a try. For
/// what another process does that only the database sees (a psql session's lock, a worker's
/// statement, sessions ending). Never true, it throws the server's error naming `what`.
func waitUntil(_ database: SharedDatabase, _ what: String, _ question: String) async throws {
    try await database.psql(
        """
        DO $$ BEGIN
          FOR attempt IN 1..6000 LOOP
            -- pg_stat_activity is read once a transaction unless its snapshot is let go.
            PERFORM pg_stat_clear_snapshot();
            IF (\(question)) THEN RETURN; END IF;
            PERFORM pg_sleep(0.01);
          END LOOP;
          RAISE EXCEPTION 'never seen in a minute: %', '\(what.replacingOccurrences(of: "'", with: "''"))';
        END $$
        """)
}

/// The question for ``waitUntil(_:_:_:)`` whether a session of the database other than the
/// asking one matches `condition` on `pg_stat_activity`.
func anotherSession(where condition: String) -> String {
    """
    SELECT EXISTS (SELECT 1 FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid() AND \(condition))
    """
}

/// The built `dopesync` with `arguments`, and `environment` added to the test's.
func dopesync(_ arguments: [String], environment: [String: String]) async throws -> ProcessOutput {
    try await runBuilt("dopesync", arguments, environment: environment)
}
