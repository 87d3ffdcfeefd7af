import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport
import Foundation
import Logging
import NIOCore
import NIOSSL
import PostgresNIO
import Synchronization

/// The checkpoint store several hosts share: PostgreSQL, reached through postgres-nio's pooled
/// `PostgresClient`. It holds what the SQLite file holds on one host (steps with their server
/// ids, bundles with their attempts and deferrals, runs, the reference lists) and the claims,
/// as leases with a fence.
///
/// Promises:
/// - A claim is a row of `dopesync.claims` with its owner (host, pid, run), an epoch and a lease
///   deadline on the database's clock. Taking one is one statement (`FOR UPDATE SKIP LOCKED`);
///   each claim of a bundle increments its epoch. See ``LeaseBook`` for the worker's side.
/// - Every write about a claimed bundle runs in a transaction that first locks the claim's row
///   (`FOR SHARE`) under this worker's epoch and run: a worker whose claim was taken over writes
///   nothing (`CheckpointError/Code/leaseLost`). No transaction spans an HTTP request.
/// - Every statement has a time limit (``statementTimeout``): a database that stops answering is
///   `CheckpointError/Code/unreachable` within it, never a wait for ever (postgres-nio's pool
///   waits for a connection as long as it is asked to: vapor/postgres-nio#489, #599).
/// - Times are seconds since 1970 (`double precision`), as in the SQLite file, so `migrate --to`
///   copies them as they are. Lease deadlines are on the database's clock alone.
public final class PostgresCheckpoints: Sendable {
    let client: PostgresClient
    let settings: DatabaseSettings
    /// Who takes claims through this store (nil: a command that takes none).
    let owner: ClaimOwner?
    let leaseBook: Mutex<LeaseBook>
    /// The bundles this worker claimed by taking over a lease that ran out (their worker stopped
    /// renewing): only those may be taken from `processing/` while a lock on them is held.
    let takenOver = Mutex(Set<String>())
    let logger: Logger
    /// The longest one statement or transaction may take before the database counts as unreachable.
    let statementTimeout: Duration
    /// Whether the last statement to end, or the question asked before one (``answersAgain(_:within:)``),
    /// failed for want of the database.
    private let unreachable = Atomic(false)
    public var isUnreachable: Bool { unreachable.load(ordering: .relaxed) }
    /// Whether one of the run's checkpoints ran out of time since the last statement succeeded
    /// (``WaitInVain/counts``): the next ones ask first whether the database answers at all.
    private let waitedInVain = Atomic(false)

    /// Writes no caller waits for (result batches, reference lists), run one after another in
    /// the order queued, in the store's own task.
    let queuedWrites: AsyncStream<@Sendable () async -> Void>.Continuation
    private let writeQueue: AsyncStream<@Sendable () async -> Void>
    /// Whether this host's clock is synchronized, and now on its boot's clock: for first sights
    /// and deferrals (``DeferralPolicy``).
    let clock: ClockFacts

    private init(
        client: PostgresClient, settings: DatabaseSettings, owner: ClaimOwner?, statementTimeout: Duration,
        clock: ClockFacts, logger: Logger
    ) {
        self.clock = clock
        self.client = client
        self.settings = settings
        self.owner = owner
        self.leaseBook = Mutex(LeaseBook(duration: settings.lease))
        self.statementTimeout = statementTimeout
        self.logger = logger
        (writeQueue, queuedWrites) = AsyncStream.makeStream(of: (@Sendable () async -> Void).self)
    }

    /// Connects, brings the schema up to date, and runs `body` with the store; the pool, the
    /// lease renewals and the results' commits run beside it and stop when it returns.
    ///
    /// Throws `CheckpointError/Code/unreachable` when the database cannot be reached at all,
    /// before anything is claimed.
    public static func with<Value: Sendable>(
        _ settings: DatabaseSettings, owner: ClaimOwner? = nil, statementTimeout: Duration = .seconds(10),
        clock: ClockFacts = .system, logger: Logger, _ body: (PostgresCheckpoints) async throws -> Value
    ) async throws -> Value {
        // One connection of its own first: the pool would wait for ever on a database that is
        // down or refuses us, where this fails at once with the reason.
        // Connecting takes a password exchange and, the first time, creating the schema: more
        // than a statement, so more time.
        try await PostgresSchema.migrate(settings, timeout: max(statementTimeout, .seconds(30)), logger: logger)
        let client = PostgresClient(
            configuration: clientConfiguration(settings, statementTimeout: statementTimeout), backgroundLogger: logger)
        let store = PostgresCheckpoints(
            client: client, settings: settings, owner: owner, statementTimeout: statementTimeout, clock: clock,
            logger: logger)
        // The pool runs in a task of its own, not a child: a pool that lost its server may not
        // end when cancelled (vapor/postgres-nio#599), and the run must end all the same. Its fix
        // (vapor/postgres-nio#647) came after 1.33.2, the newest release this project can build
        // with; with it, this becomes a child of the group below. Such a task inherits no
        // executor preference, so it names the run's.
        let pool = Task(executorPreference: UploadExecutor.loops) { await client.run() }
        let result: Result<Value, any Error> = await withTaskGroup(of: Void.self) { group in
            group.addTask { await store.runQueuedWrites() }
            if owner != nil { group.addTask { await store.renewLeases() } }
            let result: Result<Value, any Error>
            do {
                result = .success(try await body(store))
            } catch {
                result = .failure(error)
            }
            // What still waits to commit is committed (or times out) before the pool closes.
            store.queuedWrites.finish()
            await group.next()  // the first to end is the queue, finished above
            group.cancelAll()
            return result
        }
        pool.cancel()
        _ = try? await withBoundedWait(.seconds(5)) { await pool.value }
        return try result.get()
    }

    static func clientConfiguration(_ settings: DatabaseSettings, statementTimeout: Duration)
        -> PostgresClient.Configuration
    {
        var configuration = PostgresClient.Configuration(
            host: settings.host, port: settings.port, username: settings.user, password: settings.password,
            database: settings.database, tls: tls(settings.tls))
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.maximumConnections = 40
        configuration.options.keepAliveBehavior = .init(frequency: .seconds(15))
        configuration.options.additionalStartupParameters = sessionSettings(
            settings, statementTimeout: statementTimeout)
        return configuration
    }

    /// Set on every connection:
    /// - `idle_in_transaction_session_timeout`: a worker cut off from the database in the middle
    ///   of a transaction (a partition drops its packets, so the server hears nothing) would
    ///   otherwise keep the claim rows it locked until TCP gives up, hours later, and no other
    ///   worker could take its bundles over. Its transactions take milliseconds; a third of the
    ///   lease is far more than any needs, and short enough for a takeover soon after.
    /// - `plan_cache_mode`: the prepared statements (``HotStatement``) are planned once, not at
    ///   each execution. Left to itself the server plans each of a connection's first five
    ///   executions anew, and a pool of many connections rarely gets past five. Every statement
    ///   finds its rows by key, which a generic plan does as well as a custom one.
    /// - `statement_timeout` and `lock_timeout`: the server cancels a statement that outlives
    ///   four fifths of the run's wait (``statementTimeout``), and one waiting for a lock half as
    ///   long, so that a statement's wait ends with the server's own "cancelled" and nothing of it
    ///   commits later: a wait that only gave up on it left the statement running, and a write the
    ///   run had reported failed once committed after the report. A transaction of several statements
    ///   commits only within the same limit (``transaction(_:timeout:_:)``).
    static func sessionSettings(_ settings: DatabaseSettings, statementTimeout: Duration) -> [(String, String)] {
        let milliseconds = Int(idleInTransactionTimeout(settings) / .milliseconds(1))
        let statement = Int(statementLimit(statementTimeout) / .milliseconds(1))
        return [
            ("idle_in_transaction_session_timeout", "\(milliseconds)ms"),
            ("statement_timeout", "\(statement)ms"),
            ("lock_timeout", "\(max(statement / 2, 250))ms"),
            ("plan_cache_mode", "force_generic_plan"),
            ("application_name", "dopesync"),
        ]
    }

    /// `idle_in_transaction_session_timeout`: a third of the lease, a second at least.
    static func idleInTransactionTimeout(_ settings: DatabaseSettings) -> Duration {
        max(settings.lease / 3, .seconds(1))
    }

    /// How long one statement may take: four fifths of the run's wait, so that the server's own
    /// cancellation, and a transaction's last COMMIT, come before the wait ends.
    static func statementLimit(_ statementTimeout: Duration) -> Duration {
        max(statementTimeout * 4 / 5, .milliseconds(500))
    }

    static func tls(_ mode: DatabaseSettings.TLSMode) -> PostgresClient.Configuration.TLS {
        switch mode {
        case .disable: .disable
        case .prefer: .prefer(unverifiedTLS)
        case .verifyFull: .require(.makeClientConfiguration())
        }
    }

    /// `prefer` as libpq means it: encrypted when the server offers TLS, its certificate not
    /// checked (Debian's PostgreSQL offers a self-signed one out of the box). `verify-full` checks.
    static var unverifiedTLS: TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .none
        return tls
    }

    // MARK: - Running statements

    /// How a statement takes part in the rule of ``answersAgain(_:_:)``.
    enum WaitInVain {
        /// One of the run's checkpoints, whose failure stops the run: it asks first while a wait
        /// was in vain, and its own time running out is one.
        case counts
        /// Something the run does without (a claim let go, a reference list kept): it asks first,
        /// but its time running out says nothing the run acts on.
        case asksFirst
        /// A lease renewal: bounded well inside its interval by a wait of its own, which a loaded
        /// machine may outlast, and that a question first would lengthen.
        case exempt
    }

    /// Runs `body` with a time limit and gives every failure a `CheckpointError` code. A
    /// transaction that lost a serialization or deadlock race is run again (twice at most).
    func perform<Value: Sendable>(
        _ doing: @autoclosure () -> String, timeout: Duration? = nil, waitInVain rule: WaitInVain = .counts,
        _ body: @escaping @Sendable () async throws -> Value
    ) async throws(CheckpointError) -> Value {
        let wait = timeout ?? statementTimeout
        if rule != .exempt, waitedInVain.load(ordering: .relaxed) { try await answersAgain(doing(), within: wait) }
        var tries = 0
        while true {
            tries += 1
            do {
                let value = try await Self.withTimeout(wait, body)
                unreachable.store(false, ordering: .relaxed)
                waitedInVain.store(false, ordering: .relaxed)
                return value
            } catch {
                // A transaction's failure comes wrapped: what failed inside it is what counts
                // (a claim found lost is that, not a database that cannot be reached).
                let cause = Self.cause(of: error)
                if let cause = cause as? CheckpointError { throw cause }
                if let cause = cause as? PSQLError, tries < 3, Self.isRetryableRace(cause) { continue }
                let failure = Self.checkpointError(cause, settings: settings, doing: doing())
                unreachable.store(failure.isUnreachable, ordering: .relaxed)
                if rule == .counts, cause is TimedOut { waitedInVain.store(true, ordering: .relaxed) }
                throw failure
            }
        }
    }

    /// Whether the database answers again, asked before a statement once one of the run's
    /// checkpoints ran out of time: `SELECT 1`, given a fifth of a statement's time
    /// (``recheckLimit(_:)``), and no more than the statement's own `wait`. On no answer the
    /// statement is not sent, and fails as unreachable.
    ///
    /// Why: a run cut off from the database still has writes to settle (the results of its
    /// bundles in flight, one batch after another, then its own record), and each waited out the
    /// whole limit before the run could exit 75 (`PartitionTests` bounds it now). A database that
    /// came back answers in milliseconds, and the statement then has its full time. The statement
    /// itself is never sent with a shorter limit: its outcome must be known when the run stops
    /// waiting, which only the full limit (as `statement_timeout`) ensures.
    private func answersAgain(_ doing: String, within wait: Duration) async throws(CheckpointError) {
        let logger = self.logger
        do {
            _ = try await Self.withTimeout(min(Self.recheckLimit(statementTimeout), wait)) { [client] in
                try await client.query("SELECT 1", logger: logger).collect()
            }
        } catch {
            let cause = Self.cause(of: error)
            let failure =
                cause is TimedOut
                ? CheckpointError(
                    code: .unreachable,
                    message: "PostgreSQL at \(settings.url) did not answer SELECT 1, so \(doing) was not sent")
                : Self.checkpointError(cause, settings: settings, doing: "asking whether it answers before \(doing)")
            // Anything but the database's absence (a cancelled wait) is left to the statement.
            guard failure.isUnreachable else { return }
            unreachable.store(true, ordering: .relaxed)
            throw failure
        }
    }

    /// How long ``answersAgain(_:within:)`` waits at most: a fifth of a statement's limit, half a
    /// second at least.
    static func recheckLimit(_ statementTimeout: Duration) -> Duration {
        max(statementTimeout / 5, .milliseconds(500))
    }

    /// A transaction on one pooled connection (BEGIN … COMMIT; ROLLBACK when `body` throws).
    ///
    /// COMMIT is sent only within the part of the run's wait its statements may take (as
    /// `statement_timeout`, ``sessionSettings(_:statementTimeout:)``); later, the transaction is
    /// rolled back. Each statement keeps within its own limit, but several together could outlast
    /// the wait, and a COMMIT sent after the run had reported the write failed once made it
    /// happen all the same: now its outcome is settled by the time the wait ends.
    /// `timeout`: the wait, if not the run's (an import of many statements).
    func transaction<Value: Sendable>(
        _ doing: @autoclosure () -> String, timeout: Duration? = nil,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Value
    ) async throws(CheckpointError) -> Value {
        let logger = self.logger
        let wait = timeout ?? statementTimeout
        let statementLimit = Self.statementLimit(wait)
        return try await perform(doing(), timeout: wait) { [client] in
            let commitBy = ContinuousClock.now + statementLimit
            return try await client.withTransaction(logger: logger) { connection in
                let value = try await body(connection)
                // Thrown inside the closure, so the transaction rolls back.
                guard ContinuousClock.now < commitBy, !Task.isCancelled else { throw TimedOut() }
                return value
            }
        }
    }

    /// One statement outside a transaction, its rows collected, each made random-access once (a
    /// row read for several columns builds its name index once, not once a column).
    func rows(_ doing: @autoclosure () -> String, waitInVain rule: WaitInVain = .counts, _ query: PostgresQuery)
        async throws(CheckpointError) -> [PostgresRandomAccessRow]
    {
        let logger = self.logger
        return try await perform(doing(), waitInVain: rule) { [client] in
            try await client.query(query, logger: logger).collect().map { $0.makeRandomAccess() }
        }
    }

    static func withTimeout<Value: Sendable>(
        _ limit: Duration, _ body: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        try await withBoundedWait(limit, body)
    }

    /// The error behind a transaction's: its closure's, its BEGIN's or its COMMIT's.
    static func cause(of error: any Error) -> any Error {
        guard let transaction = error as? PostgresTransactionError else { return error }
        return transaction.closureError ?? transaction.beginError ?? transaction.commitError ?? error
    }

    /// 40001 (serialization failure) and 40P01 (deadlock): the transaction did nothing and may run again.
    static func isRetryableRace(_ error: PSQLError) -> Bool {
        guard let state = error.serverInfo?[.sqlState] else { return false }
        return state == "40001" || state == "40P01"
    }

    package static func checkpointError(_ error: any Error, settings: DatabaseSettings, doing: String)
        -> CheckpointError
    {
        if error is CancellationError {
            return CheckpointError(code: .cancelled, message: "stopped waiting for PostgreSQL while \(doing)")
        }
        if error is TimedOut {
            return CheckpointError(
                code: .unreachable, message: "PostgreSQL at \(settings.url) did not answer while \(doing)")
        }
        guard let error = error as? PSQLError else {
            if error is NIOSSLError {
                return CheckpointError(
                    code: .refused,
                    message:
                        "PostgreSQL at \(settings.url): TLS failed (\(error)); sslmode=verify-full needs a certificate the system trusts for that host"
                )
            }
            return CheckpointError(
                code: .unreachable, message: "cannot reach PostgreSQL at \(settings.url) while \(doing): \(error)")
        }
        if error.code == .sslUnsupported || error.code == .failedToAddSSLHandler {
            return CheckpointError(
                code: .refused,
                message: "PostgreSQL at \(settings.url) does not offer TLS, which sslmode=verify-full requires")
        }
        if error.code == .authMechanismRequiresPassword {
            return CheckpointError(
                code: .refused,
                message:
                    "PostgreSQL at \(settings.url) asks user \(settings.user) for a password and none was given: set DOPESYNC_DATABASE_PASSWORD or database-password-file:"
            )
        }
        if error.code == .unsupportedAuthMechanism || error.code == .saslError {
            return CheckpointError(
                code: .refused, message: "PostgreSQL at \(settings.url) refused the login: \(error.code)")
        }
        if let state = error.serverInfo?[.sqlState] {
            let message = error.serverInfo?[.message] ?? "\(error.code)"
            return checkpointError(sqlState: state, message: message, settings: settings, doing: doing)
        }
        return CheckpointError(
            code: .unreachable, message: "lost PostgreSQL at \(settings.url) while \(doing): \(error.code)")
    }

    /// What the server's SQLSTATE says, for the operator: a refusal, a full disk, a read-only
    /// server, an outage, or a failure of the statement itself.
    private static func checkpointError(
        sqlState state: String, message: String, settings: DatabaseSettings, doing: String
    )
        -> CheckpointError
    {
        switch state {
        case "28P01", "28000":
            return CheckpointError(
                code: .refused,
                message:
                    "PostgreSQL at \(settings.url) refused user \(settings.user): \(message) (the password comes from database-password-file: or DOPESYNC_DATABASE_PASSWORD)"
            )
        case "3D000":
            return CheckpointError(code: .refused, message: "PostgreSQL at \(settings.url): \(message)")
        case "53100":
            return CheckpointError(
                code: .diskFull, message: "PostgreSQL at \(settings.url) is out of disk: \(message)")
        case "25006":
            // A replica after a failover, or default_transaction_read_only: nothing can be checkpointed.
            return CheckpointError(
                code: .readOnly, message: "PostgreSQL at \(settings.url) is read-only: \(message)")
        case "42501":
            // A privilege revoked (or never granted) on the schema's tables: no bundle can be
            // checkpointed until an administrator grants it again.
            return CheckpointError(
                code: .readOnly,
                message:
                    "PostgreSQL at \(settings.url) refuses user \(settings.user) while \(doing): \(message) (grant it the dopesync schema's tables again, or run as their owner)"
            )
        case "XX001", "XX002":
            return CheckpointError(
                code: .corrupt, message: "PostgreSQL at \(settings.url) reports damaged data while \(doing): \(message)"
            )
        case _ where state.hasPrefix("58"):
            // System errors: an I/O error in the server, a file it cannot find.
            return CheckpointError(
                code: .ioError,
                message: "PostgreSQL at \(settings.url) failed while \(doing): \(message) [SQLSTATE \(state)]")
        case _ where state.hasPrefix("53"):
            // Out of memory, too many connections or another resource of the server's (53100, a
            // full disk, is above): likely to pass, as an outage is.
            return CheckpointError(
                code: .unreachable,
                message:
                    "PostgreSQL at \(settings.url) is short of resources while \(doing): \(message) [SQLSTATE \(state)]"
            )
        case "57014", "55P03":
            // statement_timeout or lock_timeout (``sessionSettings(_:statementTimeout:)``): the
            // server cancelled the statement, and its transaction did nothing.
            return CheckpointError(
                code: .unreachable,
                message:
                    "PostgreSQL at \(settings.url) did not finish in time while \(doing), and cancelled it: \(message)")
        case _ where state.hasPrefix("08") || state.hasPrefix("57P"):
            // Connection exceptions, an administrator's shutdown or restart.
            return CheckpointError(
                code: .unreachable, message: "PostgreSQL at \(settings.url) while \(doing): \(message)")
        default:
            return CheckpointError(
                code: .database,
                message: "PostgreSQL at \(settings.url) failed while \(doing): \(message) [SQLSTATE \(state)]")
        }
    }

    // MARK: - The queue of writes nobody waits for

    /// Runs the queued writes one after another, in the order queued, until the queue is
    /// finished and empty.
    private func runQueuedWrites() async {
        for await write in writeQueue { await write() }
    }

    /// Queues `write`; false once the store is closing (then it never runs).
    func enqueue(_ write: @escaping @Sendable () async -> Void) -> Bool {
        if case .terminated = queuedWrites.yield(write) { return false }
        return true
    }
}
