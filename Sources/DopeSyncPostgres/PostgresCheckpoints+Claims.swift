import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport
import Foundation
import PostgresNIO
import Synchronization

/// Claims as leases: taking, renewing, confirming and ending them, and the fence every write
/// about a claimed bundle passes.
extension PostgresCheckpoints: ClaimStorage {
    /// The database's clock in seconds since 1970: lease deadlines are on it alone.
    static let databaseNow = "extract(epoch FROM statement_timestamp())::double precision"

    public func acquireClaim(of name: String, orphan: Bool, modified: Date, owner: ClaimOwner)
        async throws(CheckpointError) -> Bool
    {
        let lease = settings.lease / .seconds(1)
        var askedAt = ContinuousClock.now
        let now = Self.databaseNow
        // Another host may have deferred it since this run listed it as due: its next attempt,
        // on the deferring worker's clock as `IncomingQueue` reads it, still holds, unless it was
        // recorded ahead of this clock (``WallClock``: the clock went back since), or before the
        // file was last modified (touched, or written anew, since it was given back: then only
        // an mtime still ahead holds it, until then).
        let clientNow = Date().timeIntervalSince1970
        let deferred = orphan ? Double.infinity : clientNow
        let mtime = modified.timeIntervalSince1970
        // A bundle never claimed: its row is made with epoch 1, in one statement.
        var epoch: Int64? = try await rows(
            "claiming \(name)",
            HotStatements.ClaimNew(
                name: name, owner: owner, leaseSeconds: lease, deferredAfter: deferred,
                modified: mtime)
        ).first.map { row throws(CheckpointError) in try Self.decode(row, "epoch") }
        let askUntil = askedAt + Self.orphanTakeoverPatience(settings)
        while epoch == nil {
            // Known: free, or its lease has run out. A claim another worker is taking this instant
            // is skipped, not waited for; `takeable` says whether the row, locked or not, was free
            // or run out as the statement began.
            let rows = try await self.rows(
                "claiming \(name)",
                """
                WITH free AS (
                    SELECT bundle_name, host AS previous_host, run_id AS previous_run FROM dopesync.claims
                    WHERE bundle_name = \(name) AND (run_id IS NULL OR lease_expires_at <= \(unescaped: now))
                        AND run_id IS DISTINCT FROM \(owner.runID)
                        AND NOT EXISTS (
                            SELECT 1 FROM dopesync.bundles WHERE name = \(name) AND last_outcome = 'deferred'
                                AND updated_at <= \(deferred + WallClock.stepTolerance)
                                AND ((updated_at >= \(mtime) AND next_attempt_at > \(deferred))
                                    OR (updated_at < \(mtime) AND \(mtime) > \(deferred))))
                    FOR UPDATE SKIP LOCKED
                ), taken AS (
                    UPDATE dopesync.claims AS c SET epoch = c.epoch + 1, run_id = \(owner.runID), host = \(owner.host),
                        pid = \(Int(owner.pid)), claimed_at = \(unescaped: now), renewed_at = \(unescaped: now),
                        lease_expires_at = \(unescaped: now) + \(lease)
                    FROM free WHERE c.bundle_name = free.bundle_name
                    RETURNING c.epoch, free.previous_host, free.previous_run
                )
                SELECT taken.epoch, taken.previous_host, taken.previous_run, EXISTS (
                    SELECT 1 FROM dopesync.claims
                    WHERE bundle_name = \(name) AND (run_id IS NULL OR lease_expires_at <= \(unescaped: now))
                        AND run_id IS DISTINCT FROM \(owner.runID)
                ) AS takeable
                FROM (VALUES (1)) AS one LEFT JOIN taken ON true
                """)
            guard let row = rows.first else { break }
            epoch = try Self.decode(row, "epoch")
            if epoch != nil, let previousRun = try Self.decode(row, "previous_run") as String? {
                takenOver.withLock { _ = $0.insert(name) }
                let previousHost = try Self.decode(row, "previous_host") as String?
                logger.warning(
                    "taking over a bundle whose claim ran out: its worker stopped renewing it",
                    metadata: [
                        "bundle.name": "\(name)", "previous.host": "\(previousHost ?? "-")",
                        "previous.run": "\(previousRun)",
                    ])
            }
            // An orphan whose row a statement locked as it was free (a dead worker's last write,
            // delivered when a partition heals, fenced and harmless) is asked again a few times:
            // skipped, it would wait for the next run. Anything else is another worker's.
            guard epoch == nil, orphan, try Self.decode(row, "takeable") as Bool, askedAt < askUntil else { break }
            do { try await sleepOnLoop(for: Self.orphanTakeoverPause) } catch { break }
            askedAt = .now
        }
        guard let epoch else { return false }
        leaseBook.withLock { $0.acquired(name, epoch: epoch, askedAt: askedAt) }
        return true
    }

    /// How long a takeover of an orphan is asked again while its free row is locked: until the
    /// server has ended a session idle in a transaction that holds it (a dead worker's, of which
    /// only the first statements arrived), and a second more; and the pause between asks.
    static func orphanTakeoverPatience(_ settings: DatabaseSettings) -> Duration {
        idleInTransactionTimeout(settings) + .seconds(1)
    }
    static let orphanTakeoverPause = Duration.milliseconds(200)

    public func tookOverExpiredLease(of name: String) -> Bool {
        takenOver.withLock { $0.contains(name) }
    }

    public func holdsClaim(of name: String) -> Bool {
        leaseBook.withLock { $0.fence(name, at: .now) } != nil
    }

    /// Leases run out on their own: a paused worker's may be another's when it wakes.
    public var claimsRunOut: Bool { true }

    public func confirmClaim(of name: String) async -> Bool {
        guard let fence = try? fence(name) else { return false }
        let askedAt = ContinuousClock.now
        let renewed = try? await rows(
            "confirming the claim of \(name)",
            HotStatements.ConfirmClaim(fence: fence, leaseSeconds: settings.lease / .seconds(1)))
        guard let renewed else { return false }
        leaseBook.withLock { $0.renewed(renewed.isEmpty ? [] : [name], of: [name: fence.epoch], askedAt: askedAt) }
        return holdsClaim(of: name)
    }

    public func releaseClaim(of name: String) async {
        // A lease known lost is another worker's now: nothing to let go.
        takenOver.withLock { _ = $0.remove(name) }
        let held = leaseBook.withLock { book in
            defer { book.released(name) }
            return book.leases[name].flatMap { $0.lost ? nil : $0.epoch }
        }
        guard let owner, let epoch = held else { return }
        _ = try? await rows(
            "releasing the claim of \(name)", waitInVain: .asksFirst,
            """
            UPDATE dopesync.claims SET run_id = NULL, lease_expires_at = NULL
            WHERE bundle_name = \(name) AND epoch = \(epoch) AND run_id = \(owner.runID)
            """)
    }

    /// Renews every lease held, every third of a lease, until cancelled. A lease the database no
    /// longer holds for this worker is marked lost; one that cannot be renewed (the database is
    /// unreachable) runs out on the worker's clock.
    func renewLeases() async {
        guard let owner else { return }
        let interval = settings.lease / 3
        while !Task.isCancelled {
            do {
                try await sleepOnLoop(for: interval)
            } catch {
                return
            }
            let askedAt = ContinuousClock.now
            let due = leaseBook.withLock { $0.renewable(at: askedAt) }
            guard !due.isEmpty else { continue }
            let names = Array(due.keys)
            do {
                // Bounded well inside the renewal interval: one slow renewal must not use up
                // the time every lease has left.
                let rows = try await rows(
                    "renewing \(names.count) claims", timeout: min(statementTimeout, interval / 2), waitInVain: .exempt,
                    HotStatements.RenewLeases(
                        runID: owner.runID, leaseSeconds: settings.lease / .seconds(1),
                        claims: names.map { ($0, due[$0]!) }))
                let renewed = Set(rows.compactMap { try? Self.decode($0, "bundle_name") as String })
                // A claim that ended while the renewal was on its way (its bundle moved) is not
                // renewed either, and is no loss: only those still in the book now lost are told.
                let lost = leaseBook.withLock { book in
                    book.renewed(renewed, of: due, askedAt: askedAt)
                    return names.filter { !renewed.contains($0) && book.leases[$0]?.lost == true }
                }
                for name in lost {
                    logger.error(
                        "the claim was lost: its lease ran out in the database; nothing more is sent for the bundle",
                        metadata: ["bundle.name": "\(name)"])
                }
            } catch {
                logger.warning(
                    "cannot renew the claims: each runs out at its deadline unless renewed before",
                    metadata: ["claims": "\(names.count)", "error": "\(error)"])
            }
        }
    }

    /// Busy while another bundle of the session holds it: its row names the session and says
    /// `claimed` (which the hold writes, and a deferral or a give-back replaces), and its claim's
    /// lease is live. Asked and answered under an advisory lock of the session, in a transaction
    /// fenced by this bundle's claim, which then marks this bundle's row so. So the hold ends with
    /// the holder's claim, moved, released or run out, and a paused worker's passes to the worker
    /// that takes its bundle over; a row left naming the session by an earlier attempt, deferred
    /// or given back, holds nothing. A store that cannot answer gives the bundle back
    /// (``SessionHoldOutcome/failed(reason:)``): going on without the hold is what it prevents.
    public func holdSession(_ sessionID: String, of claimed: ClaimedBundle) async -> SessionHoldOutcome {
        let (name, now) = (claimed.name, Self.databaseNow)
        do {
            let holder: String? = try await fencedTransaction(name, "holding session \(sessionID) for \(name)") {
                connection in
                _ = try await connection.query(
                    "SELECT pg_advisory_xact_lock(hashtextextended(\("dopesync.session:" + sessionID), 0))",
                    logger: self.logger
                ).collect()
                let rows = try await connection.query(
                    """
                    SELECT b.name FROM dopesync.bundles AS b JOIN dopesync.claims AS c ON c.bundle_name = b.name
                    WHERE b.session_id = \(sessionID) AND b.name <> \(name) AND b.last_outcome = 'claimed'
                        AND c.run_id IS NOT NULL AND c.lease_expires_at > \(unescaped: now)
                    LIMIT 1
                    """, logger: self.logger
                ).collect()
                if let row = rows.first?.makeRandomAccess() { return try Self.decode(row, "name") as String }
                // The reading ended (it found the session): should the database then fail before
                // the bundle's next record, no later claim counts this reading as cut short.
                _ = try await connection.query(
                    """
                    UPDATE dopesync.bundles SET session_id = \(sessionID), last_outcome = 'claimed', reading_since = NULL
                    WHERE name = \(name)
                    """,
                    logger: self.logger
                ).collect()
                return nil
            }
            return holder == nil ? .held(.heldByTheStore(sessionID)) : .busy
        } catch {
            return .failed(reason: "\(error)")
        }
    }

    /// The claim under which this worker may write about `name` now, or `CheckpointError/Code/leaseLost`.
    func fence(_ name: String) throws(CheckpointError) -> ClaimFence {
        guard let owner, let epoch = leaseBook.withLock({ $0.fence(name, at: .now) }) else {
            throw CheckpointError.leaseLost(name)
        }
        return ClaimFence(name: name, epoch: epoch, runID: owner.runID)
    }

    /// The database no longer holds `fence`'s claim for this worker: it is marked lost, and nothing
    /// more is sent or written for the bundle.
    func lost(_ fence: ClaimFence) -> CheckpointError {
        leaseBook.withLock { $0.lost(fence.name, epoch: fence.epoch) }
        return CheckpointError.leaseLost(fence.name)
    }

    /// A fenced write about `name` of more than one statement: the claim's row locked under this
    /// worker's epoch for the rest of the transaction (no takeover commits between the check and
    /// the writes after it), then `body`.
    func fencedTransaction<Value: Sendable>(
        _ name: String, _ doing: @autoclosure () -> String,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Value
    ) async throws(CheckpointError) -> Value {
        let fence = try fence(name)
        return try await transaction(doing()) { connection in
            var held = false
            for try await _ in try await connection.execute(HotStatements.LockClaim(fence: fence), logger: self.logger)
            {
                held = true
            }
            if !held { throw self.lost(fence) }
            return try await body(connection)
        }
    }

    /// Ends the claim of `name` inside a fenced transaction (with its outcome).
    func endClaim(_ name: String, on connection: PostgresConnection) async throws {
        guard let owner else { return }
        _ = try await connection.query(
            """
            UPDATE dopesync.claims SET run_id = NULL, lease_expires_at = NULL
            WHERE bundle_name = \(name) AND run_id = \(owner.runID)
            """, logger: logger)
    }

    /// The value of `column`, by name: a schema change shows as an error, not as a wrong column.
    static func decode<T: PostgresDecodable>(_ row: PostgresRandomAccessRow, _ column: String)
        throws(CheckpointError) -> T
    {
        do {
            return try row[column].decode(T.self)
        } catch {
            throw CheckpointError(code: .database, message: "column \(column): \(error)")
        }
    }
}

/// The claim a fenced write is made under: this worker's run and the epoch it took the bundle
/// with. A statement that writes about a claimed bundle locks the claim's row under it first
/// (its `fence` CTE, ``ClaimFence/sql(_:)``) and writes nothing when
/// the row no longer matches: the lease ran out and another worker took the bundle over.
package struct ClaimFence: Sendable {
    let name: String
    let epoch: Int64
    let runID: String

    enum Lock: String {
        /// Other writes under the same claim may go on at once; a takeover waits.
        case share = "FOR SHARE"
        /// For the write that ends the claim.
        case update = "FOR UPDATE"
    }
}
