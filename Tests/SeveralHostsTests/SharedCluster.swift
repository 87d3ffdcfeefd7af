import DopeSyncTestSupport

/// One PostgreSQL server for the suites that do not stop it, each test in a database of its own;
/// the watchdog of ``PostgresCluster`` removes it when the test process ends.
enum SharedCluster {
    private static let started = Result { try PostgresCluster.start() }

    /// A new, empty database in the shared server.
    static func freshDatabase() throws -> SharedDatabase {
        try SharedDatabase.fresh(in: started.get())
    }
}
