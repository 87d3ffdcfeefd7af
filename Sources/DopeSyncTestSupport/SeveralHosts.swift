import DopeSync
import Foundation

/// One host of several sharing a spool: what `dopesync run` is given to take part.
public struct SharedDatabase: Sendable {
    public let cluster: PostgresCluster
    /// The database's name in the cluster: each test has its own.
    public let name: String

    public var url: String { "postgresql://\(PostgresCluster.role)@127.0.0.1:\(cluster.port)/\(name)" }

    /// The settings a test's own store connects with (the password included).
    public func settings(lease: Duration = .seconds(30)) -> DatabaseSettings {
        DatabaseSettings(
            host: "127.0.0.1", port: cluster.port, user: PostgresCluster.role, database: name, tls: .disable,
            password: cluster.password, lease: lease)
    }

    /// A new, empty database owned by the `dopesync` role.
    public static func fresh(in cluster: PostgresCluster) async throws -> SharedDatabase {
        let name = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        try await cluster.psql("CREATE DATABASE \(name) OWNER \(PostgresCluster.role)", database: "postgres")
        return SharedDatabase(cluster: cluster, name: String(name))
    }

    /// `sql` as the superuser in this database; what it printed (rows a line, `|` between columns).
    @discardableResult
    public func psql(_ sql: String) async throws -> String { try await cluster.psql(sql, database: name) }

    /// The options and environment of a run on `host`: the database, its lease, the password.
    public func runArguments(host: String, lease: String = "30s") -> (options: [String], environment: [String: String])
    {
        (
            ["--database", url, "--lease", lease],
            ["DOPESYNC_HOST": host, "DOPESYNC_DATABASE_PASSWORD": cluster.password]
        )
    }
}

/// `dopesync run` on `spool` as host `host` of several sharing `database` (see
/// ``spawnRun(_:against:_:environment:errors:)``). Without `logging`, its standard error goes to a
/// file beside the spool, for a failing test to show (``Spawned/errorText``): a worker of several
/// that exits 75 or 73 says why there.
public func spawnSharedRun(
    _ spool: Spool, against server: RunningDevServer, database: SharedDatabase, host: String, lease: String = "30s",
    logging: Bool = false, _ extra: [String] = [], environment more: [String: String] = [:]
) async throws -> Spawned {
    let (options, shared) = database.runArguments(host: host, lease: lease)
    let environment = shared.merging(more) { $1 }
    return logging
        ? try await spawnRunLogging(spool, against: server, options + extra, environment: environment)
        : try await spawnRun(
            spool, against: server, options + extra, environment: environment,
            errors: .file(
                URL(fileURLWithPath: spool.root).deletingLastPathComponent()
                    .appendingPathComponent("\(host)-\(UUID().uuidString.prefix(8)).stderr").path))
}

extension ClaimStorage {
    /// The store's claim of `name`, listed with an mtime older than any deferral of it.
    public func acquireClaim(of name: String, orphan: Bool, owner: ClaimOwner) async throws(CheckpointError) -> Bool {
        try await acquireClaim(of: name, orphan: orphan, modified: .distantPast, owner: owner)
    }
}
