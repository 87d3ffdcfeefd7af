import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport
import Foundation
import Logging
import PostgresNIO

/// `dopesync migrate --to URL`: one host's SQLite checkpoints copied in, so that switching its
/// spool over resends nothing.
extension PostgresCheckpoints {
    /// What an import added, and what the database already held (left as it was).
    public struct ImportCounts: Sendable, Equatable {
        public var steps = 0
        public var bundles = 0
        public var runs = 0
        public var referenceLists = 0
        public var alreadyThere = 0
    }

    /// Copies the rows in one transaction: all of them or, on a failure, none. A row the database
    /// already holds (another host's, or an earlier import's) is kept, except a step only sent there
    /// and done in the file, which becomes done: importing twice adds nothing.
    /// A step done there under another server id is refused, naming it, before anything is written.
    ///
    /// Rows go in batches of ``importBatch``, one statement each: with a statement a row, a spool
    /// of 100,000 steps outlasted the statement wait and could not be migrated at all
    /// (BENCHMARKS.md, "Migrate in batches").
    public func importCheckpoints(
        steps: [StepRecord], bundles: [BundleState], runs: [RunRecord],
        referenceLists: [ReferenceList: CachedReferenceList], sessions: [String: SessionBinding] = [:],
        apiAddresses: [String: String] = [:]
    ) async throws(CheckpointError) -> ImportCounts {
        let now = Date().timeIntervalSince1970
        let stepRows = steps.map(ImportedStep.init)
        let bundleRows = bundles.map(ImportedBundle.init)
        let runRows = runs.map(ImportedRun.init)
        let sessionRows = sessions.map { ImportedSession(sessionID: $0.key, binding: $0.value, firstSeen: now) }
        let addressRows = apiAddresses.map { ImportedAPIAddress(url: $0.key, api: $0.value, recordedAt: now) }
        let batches = [stepRows.count, bundleRows.count, runRows.count, sessionRows.count, addressRows.count]
            .map { ($0 + Self.importBatch - 1) / Self.importBatch }.reduce(0, +)
        // Each statement keeps within the run's wait; the whole import gets one wait a batch.
        let wait = statementTimeout * (1 + batches)
        let doing = "importing \(steps.count) steps and \(bundles.count) bundles"
        return try await transaction(doing, timeout: wait) { connection in
            let logger = self.logger
            var counts = ImportCounts()
            for batch in stepRows.batches(of: Self.importBatch) {
                let rows = try await connection.query(Self.stepInsertion(try recordset(batch)), logger: logger)
                    .collect()
                guard let row = rows.first?.makeRandomAccess() else { continue }
                if let sessionID: String = try Self.decode(row, "session_id") {
                    throw CheckpointError.conflictingResult(
                        sessionID: sessionID, stepKey: try Self.decode(row, "step_key"),
                        doneAs: try Self.decode(row, "there"),
                        reportedAs: try Self.decode(row, "file"), how: "in the file as")
                }
                let added = Int(try Self.decode(row, "added") as Int64)
                counts.steps += added
                counts.alreadyThere += batch.count - added
            }
            /// Inserts `rows` a batch at a time with `statement`; how many it added.
            func insert<Row: Encodable>(_ rows: [Row], _ statement: (String) -> PostgresQuery) async throws -> Int {
                var added = 0
                for batch in rows.batches(of: Self.importBatch) {
                    let result = try await connection.query(statement(try recordset(batch)), logger: logger).collect()
                    added += Int(try Self.decode(result[0].makeRandomAccess(), "added") as Int64)
                }
                return added
            }
            counts.bundles = try await insert(bundleRows, Self.bundleInsertion)
            counts.runs = try await insert(runRows, Self.runInsertion)
            counts.alreadyThere += bundleRows.count - counts.bundles + runRows.count - counts.runs
            _ = try await insert(sessionRows, Self.sessionInsertion)
            _ = try await insert(addressRows, Self.addressInsertion)
            for (list, cached) in referenceLists {
                let insertion: PostgresQuery = """
                    INSERT INTO dopesync.reference_lists (name, etag, body, read_at)
                    VALUES (\(list.rawValue), \(cached.etag), \(ByteBuffer(bytes: cached.body)), \(now))
                    ON CONFLICT (name) DO NOTHING RETURNING 1
                    """
                if try await !connection.query(insertion, logger: logger).collect().isEmpty {
                    counts.referenceLists += 1
                } else {
                    counts.alreadyThere += 1
                }
            }
            return counts
        }
    }

    /// Rows a statement of an import carries.
    package static let importBatch = 5000

    /// Steps, unless there; a step only sent there and done in the file becomes done. A step done
    /// there under another server id than the file's comes back (and nothing is written);
    /// otherwise `added`.
    private static func stepInsertion(_ recordset: String) -> PostgresQuery {
        """
        WITH given AS (
            SELECT * FROM jsonb_to_recordset(\(recordset)::jsonb) AS g(session_id text, step_key text,
                idempotency_key text, request_fingerprint text, content_digest text, state text, server_id bigint,
                sent_at double precision, done_at double precision, bundle_name text)
        ), conflict AS (
            SELECT g.session_id, g.step_key, s.server_id AS there, g.server_id AS file
            FROM given g JOIN dopesync.steps s USING (session_id, step_key)
            WHERE s.state = 'done' AND g.state = 'done' AND s.server_id <> g.server_id
            LIMIT 1
        ), written AS (
            INSERT INTO dopesync.steps (session_id, step_key, idempotency_key, request_fingerprint,
                content_digest, state, server_id, sent_at, done_at, bundle_name)
            SELECT session_id, step_key, idempotency_key, request_fingerprint, content_digest, state, server_id,
                sent_at, done_at, bundle_name
            FROM given WHERE NOT EXISTS (SELECT 1 FROM conflict)
            ON CONFLICT (session_id, step_key) DO UPDATE SET state = 'done', server_id = excluded.server_id,
                done_at = excluded.done_at
            WHERE dopesync.steps.state = 'sent' AND excluded.state = 'done'
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM written) AS added, conflict.*
        FROM (VALUES (1)) AS one LEFT JOIN conflict ON true
        """
    }

    /// Bundles, unless there: `added`.
    private static func bundleInsertion(_ recordset: String) -> PostgresQuery {
        """
        WITH written AS (
            INSERT INTO dopesync.bundles (name, session_id, attempts, first_seen, first_seen_boot, next_attempt_at,
                last_error_reason, last_error_step, last_error_http_status, last_error_message, last_error_field,
                last_outcome, updated_at, steps_total)
            SELECT * FROM jsonb_to_recordset(\(recordset)::jsonb) AS g(name text, session_id text, attempts integer,
                first_seen double precision, first_seen_boot text, next_attempt_at double precision,
                last_error_reason text,
                last_error_step text, last_error_http_status integer, last_error_message text,
                last_error_field text, last_outcome text, updated_at double precision, steps_total integer)
            ON CONFLICT (name) DO NOTHING RETURNING 1
        )
        SELECT count(*) AS added FROM written
        """
    }

    /// Runs, unless there: `added`.
    private static func runInsertion(_ recordset: String) -> PostgresQuery {
        """
        WITH written AS (
            INSERT INTO dopesync.runs (run_id, host, pid, started_at, finished_at, claimed, done, deferred,
                failed, requests, bytes, seconds, exit_code, api_lookups)
            SELECT * FROM jsonb_to_recordset(\(recordset)::jsonb) AS g(run_id text, host text, pid integer,
                started_at double precision, finished_at double precision, claimed integer, done integer,
                deferred integer, failed integer, requests integer, bytes bigint, seconds double precision,
                exit_code integer, api_lookups boolean)
            ON CONFLICT (run_id) DO NOTHING RETURNING 1
        )
        SELECT count(*) AS added FROM written
        """
    }

    /// Each session's API and producer; a row the database already has keeps what it says, and
    /// what it lacks (a session from before bindings) is filled in.
    private static func sessionInsertion(_ recordset: String) -> PostgresQuery {
        """
        WITH written AS (
            INSERT INTO dopesync.sessions AS s (session_id, api, owner_uid, owner_name, first_seen)
            SELECT * FROM jsonb_to_recordset(\(recordset)::jsonb) AS g(session_id text, api text, owner_uid bigint,
                owner_name text, first_seen double precision)
            ON CONFLICT (session_id) DO UPDATE SET api = COALESCE(s.api, excluded.api),
                owner_name = CASE WHEN s.owner_uid IS NULL THEN excluded.owner_name ELSE s.owner_name END,
                owner_uid = COALESCE(s.owner_uid, excluded.owner_uid)
            RETURNING 1
        )
        SELECT count(*) AS added FROM written
        """
    }

    /// Each API base URL a run used, unless there.
    private static func addressInsertion(_ recordset: String) -> PostgresQuery {
        """
        WITH written AS (
            INSERT INTO dopesync.api_addresses (url, api, recorded_at)
            SELECT * FROM jsonb_to_recordset(\(recordset)::jsonb) AS g(url text, api text, recorded_at double precision)
            ON CONFLICT (url) DO NOTHING RETURNING 1
        )
        SELECT count(*) AS added FROM written
        """
    }
}

/// Rows of an import as one JSON array a statement, which `jsonb_to_recordset` turns back into
/// rows: one parameter whatever their number, where arrays for `unnest` could not carry a NULL
/// (a step's server id before it is done). Keys are the columns' names; a nil is left out, and
/// read as NULL.
/// A value JSON cannot carry (a time that is not a number) is the file's fault, not the
/// database's: the import fails as `corrupt`, and nothing is copied.
private func recordset<Row: Encodable>(_ rows: ArraySlice<Row>) throws(CheckpointError) -> String {
    let encoder = JSONEncoder()
    encoder.keyEncodingStrategy = .convertToSnakeCase
    do {
        return String(decoding: try encoder.encode(Array(rows)), as: UTF8.self)
    } catch {
        throw CheckpointError(
            code: .corrupt, message: "a row of the SQLite file holds a value that cannot be copied: \(error)")
    }
}

private struct ImportedStep: Encodable {
    var sessionId, stepKey, idempotencyKey, requestFingerprint, contentDigest, state: String
    var serverId: Int64?
    var sentAt: Double
    var doneAt: Double?
    var bundleName: String?

    init(_ step: StepRecord) {
        (sessionId, stepKey, idempotencyKey) = (step.sessionID, step.stepKey, step.idempotencyKey)
        (requestFingerprint, contentDigest, state) = (step.requestFingerprint, step.contentDigest, step.state.rawValue)
        (serverId, sentAt, doneAt) = (
            step.serverID, step.sentAt.timeIntervalSince1970, step.doneAt?.timeIntervalSince1970
        )
        bundleName = step.bundleName
    }
}

private struct ImportedBundle: Encodable {
    var name: String
    var sessionId: String?
    var attempts: Int
    var firstSeen: Double
    var firstSeenBoot: String?
    var nextAttemptAt: Double?
    var lastErrorReason, lastErrorStep: String?
    var lastErrorHttpStatus: Int?
    var lastErrorMessage, lastErrorField, lastOutcome: String?
    var updatedAt: Double
    var stepsTotal: Int?

    init(_ bundle: BundleState) {
        let error = bundle.lastError
        (name, sessionId, attempts) = (bundle.name, bundle.sessionID, bundle.attempts)
        (firstSeen, firstSeenBoot, nextAttemptAt) = (
            bundle.firstSeen.timeIntervalSince1970, bundle.firstSeenOnBoot?.stored,
            bundle.nextAttemptAt?.timeIntervalSince1970
        )
        (lastErrorReason, lastErrorStep, lastErrorHttpStatus) = (error?.reason.rawValue, error?.step, error?.httpStatus)
        (lastErrorMessage, lastErrorField, lastOutcome) = (error?.message, error?.field, bundle.lastOutcome?.rawValue)
        (updatedAt, stepsTotal) = (bundle.updatedAt.timeIntervalSince1970, bundle.stepsTotal)
    }
}

private struct ImportedRun: Encodable {
    var runId, host: String
    var pid: Int32
    var startedAt: Double
    var finishedAt: Double?
    var claimed, done, deferred, failed, requests: Int?
    var bytes: Int64?
    var seconds: Double?
    var exitCode: Int?
    var apiLookups: Bool?

    init(_ run: RunRecord) {
        let summary = run.summary
        (runId, host, pid) = (run.runID, run.host, run.pid)
        (startedAt, finishedAt) = (run.startedAt.timeIntervalSince1970, run.finishedAt?.timeIntervalSince1970)
        (claimed, done, deferred, failed) = (summary?.claimed, summary?.done, summary?.deferred, summary?.failed)
        (requests, bytes, seconds) = (summary?.requests, summary?.bytes, summary?.seconds)
        (exitCode, apiLookups) = (summary.map { Int($0.exitCode) }, run.apiLookups)
    }
}

private struct ImportedSession: Encodable {
    var sessionId: String
    var api: String?
    var ownerUid: Int64?
    var ownerName: String?
    var firstSeen: Double

    init(sessionID: String, binding: SessionBinding, firstSeen: Double) {
        (sessionId, api, ownerUid) = (sessionID, binding.api, binding.owner.map { Int64($0.uid) })
        (ownerName, self.firstSeen) = (binding.owner?.name, firstSeen)
    }
}

private struct ImportedAPIAddress: Encodable {
    var url, api: String
    var recordedAt: Double
}

extension Array {
    /// The array in consecutive slices of at most `size` elements.
    func batches(of size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}
