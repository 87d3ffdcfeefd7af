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
    public func importCheckpoints(
        steps: [StepRecord], bundles: [BundleState], runs: [RunRecord],
        referenceLists: [ReferenceList: CachedReferenceList], sessions: [String: SessionBinding] = [:],
        apiAddresses: [String: String] = [:]
    ) async throws(CheckpointError) -> ImportCounts {
        try await transaction("importing \(steps.count) steps and \(bundles.count) bundles") { connection in
            let logger = self.logger
            /// Whether `query` (an `INSERT … RETURNING 1`) added its row.
            func added(_ query: PostgresQuery) async throws -> Bool {
                try await !connection.query(query, logger: logger).collect().isEmpty
            }
            var counts = ImportCounts()
            for step in steps {
                if try await added(Self.insertion(of: step)) {
                    counts.steps += 1
                } else {
                    try await Self.checkSameResult(step, on: connection, logger: logger)
                    counts.alreadyThere += 1
                }
            }
            for bundle in bundles {
                if try await added(Self.insertion(of: bundle)) { counts.bundles += 1 } else { counts.alreadyThere += 1 }
            }
            for run in runs {
                if try await added(Self.insertion(of: run)) { counts.runs += 1 } else { counts.alreadyThere += 1 }
            }
            let now = Date().timeIntervalSince1970
            // Each session's API and producer; a row the database already has keeps what it says,
            // and what it lacks (a session from before bindings) is filled in.
            for (sessionID, binding) in sessions {
                let uid = binding.owner.map { Int64($0.uid) }
                _ = try await connection.query(
                    """
                    INSERT INTO dopesync.sessions (session_id, api, owner_uid, owner_name, first_seen)
                    VALUES (\(sessionID), \(binding.api), \(uid), \(binding.owner?.name), \(now))
                    ON CONFLICT (session_id) DO UPDATE SET api = COALESCE(dopesync.sessions.api, excluded.api),
                        owner_name = CASE WHEN dopesync.sessions.owner_uid IS NULL THEN excluded.owner_name
                            ELSE dopesync.sessions.owner_name END,
                        owner_uid = COALESCE(dopesync.sessions.owner_uid, excluded.owner_uid)
                    """, logger: logger)
            }
            for (url, api) in apiAddresses {
                _ = try await connection.query(
                    """
                    INSERT INTO dopesync.api_addresses (url, api, recorded_at) VALUES (\(url), \(api), \(now))
                    ON CONFLICT (url) DO NOTHING
                    """, logger: logger)
            }
            for (list, cached) in referenceLists {
                let insertion: PostgresQuery = """
                    INSERT INTO dopesync.reference_lists (name, etag, body, read_at)
                    VALUES (\(list.rawValue), \(cached.etag), \(ByteBuffer(bytes: cached.body)), \(now))
                    ON CONFLICT (name) DO NOTHING RETURNING 1
                    """
                if try await added(insertion) { counts.referenceLists += 1 } else { counts.alreadyThere += 1 }
            }
            return counts
        }
    }

    /// A step's row, unless one is there; a step only sent there and done in the file becomes done.
    private static func insertion(of step: StepRecord) -> PostgresQuery {
        """
        INSERT INTO dopesync.steps (session_id, step_key, idempotency_key, request_fingerprint,
            content_digest, state, server_id, sent_at, done_at, bundle_name)
        VALUES (\(step.sessionID), \(step.stepKey), \(step.idempotencyKey), \(step.requestFingerprint),
            \(step.contentDigest), \(step.state.rawValue), \(step.serverID), \(step.sentAt.timeIntervalSince1970),
            \(step.doneAt?.timeIntervalSince1970), \(step.bundleName))
        ON CONFLICT (session_id, step_key) DO UPDATE SET state = 'done', server_id = excluded.server_id,
            done_at = excluded.done_at
        WHERE dopesync.steps.state = 'sent' AND excluded.state = 'done'
        RETURNING 1
        """
    }

    /// A bundle's row, unless one is there.
    private static func insertion(of bundle: BundleState) -> PostgresQuery {
        let error = bundle.lastError
        return """
            INSERT INTO dopesync.bundles (name, session_id, attempts, first_seen, next_attempt_at,
                last_error_reason, last_error_step, last_error_http_status, last_error_message, last_error_field,
                last_outcome, updated_at, steps_total)
            VALUES (\(bundle.name), \(bundle.sessionID), \(bundle.attempts), \(bundle.firstSeen.timeIntervalSince1970),
                \(bundle.nextAttemptAt?.timeIntervalSince1970), \(error?.reason.rawValue), \(error?.step),
                \(error?.httpStatus), \(error?.message), \(error?.field), \(bundle.lastOutcome?.rawValue),
                \(bundle.updatedAt.timeIntervalSince1970), \(bundle.stepsTotal))
            ON CONFLICT (name) DO NOTHING RETURNING 1
            """
    }

    /// A run's row, unless one is there.
    private static func insertion(of run: RunRecord) -> PostgresQuery {
        let summary = run.summary
        return """
            INSERT INTO dopesync.runs (run_id, host, pid, started_at, finished_at, claimed, done, deferred,
                failed, requests, bytes, seconds, exit_code, api_lookups)
            VALUES (\(run.runID), \(run.host), \(Int(run.pid)), \(run.startedAt.timeIntervalSince1970),
                \(run.finishedAt?.timeIntervalSince1970), \(summary?.claimed), \(summary?.done),
                \(summary?.deferred), \(summary?.failed), \(summary?.requests), \(summary?.bytes),
                \(summary?.seconds), \(summary.map { Int($0.exitCode) }), \(run.apiLookups))
            ON CONFLICT (run_id) DO NOTHING RETURNING 1
            """
    }

    /// A step the database holds already must say what the file says of it, if both say it is
    /// done: two server ids for one step mean the record may exist twice on the server.
    private static func checkSameResult(_ step: StepRecord, on connection: PostgresConnection, logger: Logger)
        async throws
    {
        guard let serverID = step.serverID else { return }
        let rows = try await connection.query(
            """
            SELECT server_id FROM dopesync.steps
            WHERE session_id = \(step.sessionID) AND step_key = \(step.stepKey) AND state = 'done'
            """, logger: logger
        ).collect()
        if let row = rows.first?.makeRandomAccess(), let there: Int64 = try decode(row, "server_id"), there != serverID
        {
            throw CheckpointError.conflictingResult(
                sessionID: step.sessionID, stepKey: step.stepKey, doneAs: there, reportedAs: serverID,
                how: "in the file as")
        }
    }
}
