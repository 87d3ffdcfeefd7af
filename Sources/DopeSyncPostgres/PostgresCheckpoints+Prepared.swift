import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport
import PostgresNIO

/// The statements a run makes for every bundle and every step, prepared once on each pooled
/// connection and executed by name after that.
///
/// Why: sent as plain queries, PostgreSQL parsed and planned each of them every time, and that
/// took most of the server's time for them (BENCHMARKS.md, "Several hosts after prepared
/// statements"): CPU taken from the worker and the API server on a small machine, and time
/// between a bundle's requests.
///
/// Each is a `PostgresPreparedStatement` with its parameters in the order of their `$n`. A
/// fenced statement's first three parameters are always its fence's (``ClaimFence/sql(_:)``).
package protocol HotStatement: PostgresPreparedStatement where Row == PostgresRandomAccessRow {}

extension HotStatement {
    func decodeRow(_ row: PostgresRow) throws -> PostgresRandomAccessRow { row.makeRandomAccess() }
}

extension PostgresCheckpoints {
    /// Runs a prepared statement with a time limit, its rows collected (see
    /// ``perform(_:timeout:waitInVain:_:)``).
    func rows<Statement: HotStatement>(
        _ doing: @autoclosure () -> String, timeout: Duration? = nil, waitInVain rule: WaitInVain = .counts,
        _ statement: Statement
    ) async throws(CheckpointError) -> [PostgresRandomAccessRow] {
        let logger = self.logger
        return try await perform(doing(), timeout: timeout, waitInVain: rule) { [client] in
            var rows: [PostgresRandomAccessRow] = []
            for try await row in try await client.execute(statement, logger: logger) { rows.append(row) }
            return rows
        }
    }
}

extension ClaimFence {
    /// The fence of a prepared statement: `$1` the bundle's name, `$2` the epoch, `$3` the run.
    static func sql(_ lock: Lock) -> String {
        "SELECT bundle_name FROM dopesync.claims WHERE bundle_name = $1 AND epoch = $2 AND run_id = $3 \(lock.rawValue)"
    }

    /// Bindings that start with the fence's `$1`, `$2` and `$3`.
    var bindings: PostgresBindings {
        var bindings = PostgresBindings(capacity: 8)
        bindings.append(name)
        bindings.append(epoch)
        bindings.append(runID)
        return bindings
    }
}

/// The hot statements themselves, each documented where it is used.
package enum HotStatements {
    /// A bundle never claimed: its claim row, epoch 1, unless another host deferred it past
    /// `$6` (the worker's clock), as `IncomingQueue.retryTime` reads it: not a deferral recorded
    /// ahead of it by more than ``WallClock/stepTolerance``; for a file modified since (mtime
    /// `$7`), only until that mtime, when it is ahead. Returns `epoch`; no row when the
    /// bundle is known (then a takeover of a free or expired claim is tried) or deferred.
    struct ClaimNew: HotStatement {
        static let sql = """
            INSERT INTO dopesync.claims (bundle_name, epoch, run_id, host, pid, claimed_at, renewed_at, lease_expires_at)
            SELECT $1, 1, $2, $3, $4, \(PostgresCheckpoints.databaseNow), \(PostgresCheckpoints.databaseNow),
                \(PostgresCheckpoints.databaseNow) + $5
            WHERE NOT EXISTS (
                SELECT 1 FROM dopesync.bundles WHERE name = $1 AND last_outcome = 'deferred'
                    AND updated_at <= $6 + \(WallClock.stepTolerance)
                    AND ((updated_at >= $7 AND next_attempt_at > $6) OR (updated_at < $7 AND $7 > $6)))
            ON CONFLICT (bundle_name) DO NOTHING
            RETURNING epoch
            """
        static let bindingDataTypes: [PostgresDataType] = [.text, .text, .text, .int8, .float8, .float8, .float8]
        let name: String
        let owner: ClaimOwner
        let leaseSeconds: Double
        let deferredAfter: Double
        let modified: Double

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 7)
            bindings.append(name)
            bindings.append(owner.runID)
            bindings.append(owner.host)
            bindings.append(Int64(owner.pid))
            bindings.append(leaseSeconds)
            bindings.append(deferredAfter)
            bindings.append(modified)
            return bindings
        }
    }

    /// The reading mark (``PostgresCheckpoints/beginReading(name:now:)``): `$4` the time, `$5` the
    /// moment on the boot's clock if the wall clock is not synchronized (``ClockFacts/firstSightStamp``;
    /// NULL otherwise).
    struct MarkReading: HotStatement {
        static let sql = """
            WITH fence AS (\(ClaimFence.sql(.share)))
            INSERT INTO dopesync.bundles AS b (name, first_seen, first_seen_boot, updated_at, reading_since)
            SELECT $1, $4, $5, $4, $4 WHERE EXISTS (SELECT 1 FROM fence)
            ON CONFLICT (name) DO UPDATE SET \(startedAfreshWhenDone),
                readings_cut_short = CASE WHEN b.last_outcome IN \(BundleOutcome.finishedSQL) THEN 0
                    ELSE b.readings_cut_short + (b.reading_since IS NOT NULL)::int END,
                reading_since = excluded.reading_since
            RETURNING readings_cut_short
            """
        static let bindingDataTypes: [PostgresDataType] = [.text, .int8, .text, .float8, .text]
        let fence: ClaimFence
        let time: Double
        let firstSight: BootInstant?

        func makeBindings() -> PostgresBindings {
            var bindings = fence.bindings
            bindings.append(time)
            bindings.appendFirstSight(firstSight)
            return bindings
        }

        /// The `SET` list that gives a finished (done or failed) bundle's row the values of a new one (`excluded`'s,
        /// or the columns' defaults) and leaves any other row as it is.
        private static var startedAfreshWhenDone: String {
            let fresh: [(column: String, value: String)] = [
                ("session_id", "NULL"), ("attempts", "0"), ("first_seen", "excluded.first_seen"),
                ("first_seen_boot", "excluded.first_seen_boot"),
                ("next_attempt_at", "NULL"), ("last_error_reason", "NULL"), ("last_error_step", "NULL"),
                ("last_error_http_status", "NULL"), ("last_error_message", "NULL"), ("last_error_field", "NULL"),
                ("last_outcome", "NULL"), ("updated_at", "excluded.updated_at"), ("steps_total", "NULL"),
            ]
            return fresh.map {
                "\($0.column) = CASE WHEN b.last_outcome IN \(BundleOutcome.finishedSQL) THEN \($0.value) ELSE b.\($0.column) END"
            }
            .joined(separator: ", ")
        }
    }

    /// The claim record (``PostgresCheckpoints/recordClaim(name:sessionID:owner:producer:api:totalSteps:now:)``):
    /// `$4` the session, `$5` the time, `$6` the plan's steps, `$7`–`$9` the API and the producer
    /// (uid, name) a new session is bound to, `$10` the moment on the boot's clock (as above). Returns `fenced`, whether the session was new (and
    /// is now bound to them), its binding as it was, and its steps already done.
    struct RecordClaim: HotStatement {
        static let sql = """
            WITH fence AS (\(ClaimFence.sql(.share))), claimed AS (
                INSERT INTO dopesync.bundles (name, session_id, first_seen, first_seen_boot, last_outcome, updated_at,
                    steps_total)
                SELECT $1, $4, $5, $10, 'claimed', $5, $6 WHERE EXISTS (SELECT 1 FROM fence)
                ON CONFLICT (name) DO UPDATE SET
                    session_id = excluded.session_id, last_outcome = 'claimed', updated_at = excluded.updated_at,
                    steps_total = excluded.steps_total, reading_since = NULL, readings_cut_short = 0
                RETURNING name
            ), new_session AS (
                INSERT INTO dopesync.sessions (session_id, api, owner_uid, owner_name, first_seen)
                SELECT $4, $7, $8, $9, $5 WHERE EXISTS (SELECT 1 FROM fence)
                ON CONFLICT (session_id) DO NOTHING
                RETURNING session_id
            )
            SELECT EXISTS (SELECT 1 FROM fence) AS fenced, EXISTS (SELECT 1 FROM new_session) AS session_new,
                b.session_id IS NOT NULL AS session_known, b.api, b.owner_uid, b.owner_name,
                s.step_key, s.server_id, s.content_digest, s.done_at
            FROM (VALUES (1)) AS one
            LEFT JOIN dopesync.sessions b ON b.session_id = $4
            LEFT JOIN dopesync.steps s ON s.session_id = $4 AND s.state = 'done'
            """
        static let bindingDataTypes: [PostgresDataType] = [
            .text, .int8, .text, .text, .float8, .int4, .text, .int8, .text, .text,
        ]
        let fence: ClaimFence
        let sessionID: String
        let time: Double
        let totalSteps: Int32
        let api: String
        let producer: Producer
        let firstSight: BootInstant?

        func makeBindings() -> PostgresBindings {
            var bindings = fence.bindings
            bindings.append(sessionID)
            bindings.append(time)
            bindings.append(totalSteps)
            bindings.append(api)
            bindings.append(Int64(producer.uid))
            bindings.append(producer.name)
            bindings.appendFirstSight(firstSight)
            return bindings
        }
    }

    /// The intents of a batch of steps (``PostgresCheckpoints/recordIntents(sessionID:_:)``):
    /// `$4` the session, `$5` the time, `$6`–`$9` the steps' keys, idempotency keys, request
    /// fingerprints and content digests. Returns `fenced` and each step's row as it was before.
    struct RecordIntents: HotStatement {
        static let sql = writing(foundDone: false)
        static let bindingDataTypes: [PostgresDataType] = [
            .text, .int8, .text, .text, .float8, .textArray, .textArray, .textArray, .textArray,
        ]
        let fence: ClaimFence
        let sessionID: String
        let time: Double
        let intents: [CheckpointStore.StepIntent]

        func makeBindings() -> PostgresBindings {
            var bindings = fence.bindings
            bindings.append(sessionID)
            bindings.append(time)
            bindings.append(intents.map(\.stepKey))
            bindings.append(intents.map(\.idempotencyKey))
            bindings.append(intents.map(\.requestFingerprint))
            bindings.append(intents.map(\.contentDigest))
            return bindings
        }

        /// Only a missing row or a `sent` one is written (`StepRules`). `foundDone`: the steps
        /// are written `done` at once, with the server ids in `$10`.
        static func writing(foundDone: Bool) -> String {
            let serverIDs = foundDone ? ", $10::bigint[]" : ""
            let serverIDColumn = foundDone ? ", server_id" : ""
            let state = foundDone ? "'done'" : "'sent'"
            let doneColumns = foundDone ? ", server_id, done_at" : ""
            let doneValues = foundDone ? ", server_id, $5" : ""
            let doneUpdate =
                foundDone ? ", state = excluded.state, server_id = excluded.server_id, done_at = excluded.done_at" : ""
            return """
                WITH fence AS (\(ClaimFence.sql(.share))), given AS (
                    SELECT * FROM unnest($6::text[], $7::text[], $8::text[], $9::text[]\(serverIDs))
                        AS given(step_key, idempotency_key, request_fingerprint, content_digest\(serverIDColumn))
                ), before AS (
                    SELECT s.step_key, s.state, s.server_id, s.content_digest, s.done_at, s.request_fingerprint,
                        s.bundle_name
                    FROM dopesync.steps s JOIN given USING (step_key) WHERE s.session_id = $4 FOR UPDATE OF s
                ), written AS (
                    INSERT INTO dopesync.steps (session_id, step_key, idempotency_key, request_fingerprint,
                        content_digest, state, sent_at, bundle_name\(doneColumns))
                    SELECT $4, step_key, idempotency_key, request_fingerprint, content_digest, \(state), $5, $1\(doneValues)
                    FROM given WHERE EXISTS (SELECT 1 FROM fence)
                    ON CONFLICT (session_id, step_key) DO UPDATE SET idempotency_key = excluded.idempotency_key,
                        request_fingerprint = excluded.request_fingerprint, content_digest = excluded.content_digest,
                        sent_at = excluded.sent_at, bundle_name = excluded.bundle_name\(doneUpdate)
                    WHERE dopesync.steps.state = 'sent'
                    RETURNING step_key
                )
                SELECT EXISTS (SELECT 1 FROM fence) AS fenced,
                    before.step_key, before.state, before.server_id, before.content_digest, before.done_at,
                    before.request_fingerprint, before.bundle_name
                FROM (VALUES (1)) AS one LEFT JOIN before ON true
                """
        }
    }

    /// Steps found on the server with no result here
    /// (``PostgresCheckpoints/recordFoundOnServer(sessionID:_:)``): as ``RecordIntents``, each
    /// step written `done` at once, `$10` their server ids.
    struct RecordFound: HotStatement {
        static let sql = RecordIntents.writing(foundDone: true)
        static let bindingDataTypes = RecordIntents.bindingDataTypes + [.int8Array]
        let intents: RecordIntents
        let serverIDs: [Int64]

        func makeBindings() -> PostgresBindings {
            var bindings = intents.makeBindings()
            bindings.append(serverIDs)
            return bindings
        }
    }

    /// The results of one batch (``PostgresCheckpoints/recordResultsNow(_:)``), each fenced by the
    /// claim of its step's bundle: `$1` this run, `$2` the time, `$3`–`$5` the results' sessions,
    /// step keys and server ids, `$6` and `$7` the names and epochs of the claims held. Returns
    /// each step's row as it was, and whether its bundle's claim held (`fenced`).
    struct RecordResults: HotStatement {
        static let sql = """
            WITH given AS (
                SELECT * FROM unnest($3::text[], $4::text[], $5::bigint[]) AS given(session_id, step_key, new_id)
            ), current AS (
                -- Each step by its key (a lateral lookup: never a scan of the whole table, whatever
                -- the plan cached when the table was small would have chosen).
                SELECT s.session_id, s.step_key, s.state, s.server_id, s.content_digest, s.done_at,
                    s.request_fingerprint, s.bundle_name, given.new_id
                FROM given CROSS JOIN LATERAL (
                    SELECT * FROM dopesync.steps s
                    WHERE s.session_id = given.session_id AND s.step_key = given.step_key FOR UPDATE
                ) AS s
            ), fence AS (
                SELECT c.bundle_name FROM dopesync.claims c
                JOIN unnest($6::text[], $7::bigint[]) AS mine(name, epoch)
                    ON c.bundle_name = mine.name AND c.epoch = mine.epoch
                WHERE c.run_id = $1 AND c.bundle_name IN (SELECT bundle_name FROM current)
                FOR SHARE OF c
            ), done AS (
                -- Runs although nothing reads it, as every data-modifying CTE does.
                UPDATE dopesync.steps s SET state = 'done', server_id = current.new_id, done_at = $2
                FROM current
                WHERE s.session_id = current.session_id AND s.step_key = current.step_key AND current.state = 'sent'
                    AND current.bundle_name IN (SELECT bundle_name FROM fence)
            )
            SELECT current.session_id, current.step_key, current.state, current.server_id, current.content_digest,
                current.done_at, current.request_fingerprint, current.bundle_name,
                current.bundle_name IN (SELECT bundle_name FROM fence) AS fenced
            FROM current
            """
        static let bindingDataTypes: [PostgresDataType] = [
            .text, .float8, .textArray, .textArray, .int8Array, .textArray, .int8Array,
        ]
        let runID: String
        let time: Double
        let results: [CheckpointStore.StepResult]
        let held: [(name: String, epoch: Int64)]

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 7)
            bindings.append(runID)
            bindings.append(time)
            bindings.append(results.map(\.sessionID))
            bindings.append(results.map(\.stepKey))
            bindings.append(results.map(\.serverID))
            bindings.append(held.map(\.name))
            bindings.append(held.map(\.epoch))
            return bindings
        }
    }

    /// Locks the claim's row for the rest of a transaction of several statements
    /// (``PostgresCheckpoints/fencedTransaction(_:_:_:)``). One row while the claim is this worker's.
    struct LockClaim: HotStatement {
        static let sql = ClaimFence.sql(.share)
        static let bindingDataTypes: [PostgresDataType] = [.text, .int8, .text]
        let fence: ClaimFence

        func makeBindings() -> PostgresBindings { fence.bindings }
    }

    /// Renews one claim just before a move (``PostgresCheckpoints/confirmClaim(of:)``): `$4` the
    /// lease in seconds. Returns `epoch` while the claim is this worker's and not run out.
    struct ConfirmClaim: HotStatement {
        static let sql = """
            UPDATE dopesync.claims SET renewed_at = \(PostgresCheckpoints.databaseNow),
                lease_expires_at = \(PostgresCheckpoints.databaseNow) + $4
            WHERE bundle_name = $1 AND epoch = $2 AND run_id = $3
                AND lease_expires_at > \(PostgresCheckpoints.databaseNow)
            RETURNING epoch
            """
        static let bindingDataTypes: [PostgresDataType] = [.text, .int8, .text, .float8]
        let fence: ClaimFence
        let leaseSeconds: Double

        func makeBindings() -> PostgresBindings {
            var bindings = fence.bindings
            bindings.append(leaseSeconds)
            return bindings
        }
    }

    /// The bundle is in `done/` under its own name, and its claim ends
    /// (``PostgresCheckpoints/recordDone(name:sessionID:finalName:)``): `$4` the session if known,
    /// `$5` the time. Returns `fenced`.
    struct RecordDone: HotStatement {
        static let sql = """
            WITH fence AS (\(ClaimFence.sql(.update))), outcome AS (
                UPDATE dopesync.bundles SET session_id = COALESCE($4, session_id), last_outcome = 'done',
                    next_attempt_at = NULL, updated_at = $5, reading_since = NULL
                WHERE name = $1 AND EXISTS (SELECT 1 FROM fence)
            ), ended AS (
                UPDATE dopesync.claims SET run_id = NULL, lease_expires_at = NULL
                WHERE bundle_name IN (SELECT bundle_name FROM fence)
            )
            SELECT EXISTS (SELECT 1 FROM fence) AS fenced
            """
        static let bindingDataTypes: [PostgresDataType] = [.text, .int8, .text, .text, .float8]
        let fence: ClaimFence
        let sessionID: String?
        let time: Double

        func makeBindings() -> PostgresBindings {
            var bindings = fence.bindings
            bindings.append(sessionID)
            bindings.append(time)
            return bindings
        }
    }

    /// Renews every lease this run holds, in one statement (``PostgresCheckpoints/renewLeases()``):
    /// `$1` the run, `$2` the lease in seconds, `$3` and `$4` the claims' names and epochs.
    /// Returns the `bundle_name` of each renewed.
    struct RenewLeases: HotStatement {
        static let sql = """
            UPDATE dopesync.claims AS c SET renewed_at = \(PostgresCheckpoints.databaseNow),
                lease_expires_at = \(PostgresCheckpoints.databaseNow) + $2
            FROM unnest($3::text[], $4::bigint[]) AS mine(name, epoch)
            WHERE c.bundle_name = mine.name AND c.epoch = mine.epoch AND c.run_id = $1
                AND c.lease_expires_at > \(PostgresCheckpoints.databaseNow)
            RETURNING c.bundle_name
            """
        static let bindingDataTypes: [PostgresDataType] = [.text, .float8, .textArray, .int8Array]
        let runID: String
        let leaseSeconds: Double
        let claims: [(name: String, epoch: Int64)]

        func makeBindings() -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 4)
            bindings.append(runID)
            bindings.append(leaseSeconds)
            bindings.append(claims.map(\.name))
            bindings.append(claims.map(\.epoch))
            return bindings
        }
    }
}

extension PostgresBindings {
    /// A first sight's stamp on the boot's clock, or NULL.
    fileprivate mutating func appendFirstSight(_ stamp: BootInstant?) {
        if let stamp { append(stamp.stored) } else { appendNull() }
    }
}
