import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport
import Foundation
import PostgresNIO

/// What the shared store's checkpoints are bound to, as in the SQLite file
/// (`CheckpointStore+Bindings.swift`): the store's id, each session's API and producer, the APIs.
extension PostgresCheckpoints {
    /// This database's store, as a spool's binding names it.
    public func storeIdentity() async throws(CheckpointError) -> StoreIdentity {
        let rows = try await rows(
            "reading the store's id", "SELECT value FROM dopesync.store_meta WHERE key = 'store_id'")
        guard let row = rows.first else {
            throw CheckpointError(code: .database, message: "dopesync.store_meta has no store_id")
        }
        return StoreIdentity(kind: .postgresql, id: try Self.decode(row, "value"), name: settings.url)
    }

    /// A claimed bundle's session whose row the claim's statement could not settle (bound to
    /// another API or producer, from before bindings, or being made by another worker this
    /// instant), bound as `SessionBinding/decide(existing:producer:api:)` says, under the claim's
    /// fence and the session row's lock.
    func bindSession(_ name: String, sessionID: String, producer: Producer, api: String, now: Date)
        async throws(CheckpointError) -> SessionClaim
    {
        let logger = self.logger
        return try await fencedTransaction(name, "binding session \(sessionID)") { connection in
            let time = now.timeIntervalSince1970
            let uid = Int64(producer.uid)
            // Made here, if no one made it: then it is this bundle's.
            let inserted = try await connection.query(
                """
                INSERT INTO dopesync.sessions (session_id, api, owner_uid, owner_name, first_seen)
                VALUES (\(sessionID), \(api), \(uid), \(producer.name), \(time))
                ON CONFLICT (session_id) DO NOTHING RETURNING session_id
                """, logger: logger
            ).collect()
            if inserted.isEmpty {
                let rows = try await connection.query(
                    "SELECT api, owner_uid, owner_name FROM dopesync.sessions WHERE session_id = \(sessionID) FOR UPDATE",
                    logger: logger
                ).collect().map { $0.makeRandomAccess() }
                let existing = try rows.first.map { row throws(CheckpointError) in try Self.sessionBinding(row) }
                switch SessionBinding.decide(existing: existing, producer: producer, api: api) {
                case .anotherProducer(let first):
                    return SessionClaim.anotherProducer(first)
                case .continuation:
                    break
                case .bind(let binding, let forgetServerIDs):
                    _ = try await connection.query(
                        """
                        UPDATE dopesync.sessions SET api = \(binding.api), owner_uid = \(binding.owner.map { Int64($0.uid) }),
                            owner_name = \(binding.owner?.name) WHERE session_id = \(sessionID)
                        """, logger: logger)
                    if forgetServerIDs {
                        _ = try await connection.query(
                            """
                            UPDATE dopesync.steps SET state = 'sent', server_id = NULL, done_at = NULL
                            WHERE session_id = \(sessionID) AND state = 'done'
                            """, logger: logger)
                    }
                }
            }
            var steps: [String: CompletedStep] = [:]
            for try await row in try await connection.query(
                """
                SELECT step_key, server_id, content_digest, done_at FROM dopesync.steps
                WHERE session_id = \(sessionID) AND state = 'done'
                """, logger: logger)
            {
                let row = row.makeRandomAccess()
                steps[try Self.decode(row, "step_key")] = try Self.completedStep(row)
            }
            return SessionClaim.resume(steps)
        }
    }

    static func sessionBinding(_ row: PostgresRandomAccessRow) throws(CheckpointError) -> SessionBinding {
        let uid: Int64? = try decode(row, "owner_uid")
        let name: String? = try decode(row, "owner_name")
        return SessionBinding(
            api: try decode(row, "api"),
            owner: uid.map { Producer(uid: UInt32(truncatingIfNeeded: $0), name: name ?? "uid \($0)") })
    }

    /// These sessions' bindings, by id, for `status`.
    public func sessionBindings(of sessionIDs: [String]) async throws(CheckpointError) -> [String: SessionBinding] {
        var bindings: [String: SessionBinding] = [:]
        for row in try await rows(
            "reading the sessions",
            """
            SELECT session_id, api, owner_uid, owner_name FROM dopesync.sessions
            WHERE session_id = ANY(\(Array(Set(sessionIDs))))
            """)
        {
            bindings[try Self.decode(row, "session_id")] = try Self.sessionBinding(row)
        }
        return bindings
    }

    /// The APIs the store knows (`APIBook`).
    public func apiBook(countingSessions: Bool) async throws(CheckpointError) -> APIBook {
        var book = APIBook()
        for row in try await rows("reading the APIs", "SELECT url, api FROM dopesync.api_addresses") {
            book.addresses[try Self.decode(row, "url")] = try Self.decode(row, "api") as String
        }
        guard countingSessions else { return book }
        for row in try await rows(
            "reading the APIs", PostgresQuery(unsafeSQL: APIBook.sessionsWithStepsDone(schema: "dopesync.")))
        {
            let api: String? = try Self.decode(row, "api")
            book.sessions[api ?? APIBook.unbound] = Int(try Self.decode(row, "sessions") as Int64)
        }
        return book
    }

    /// Records that `url` is the API `api`; gives the sessions from before APIs were recorded to
    /// `api` when `adoptUnbound`.
    public func recordAPIAddress(_ url: String, api: String, adoptUnbound: Bool) async throws(CheckpointError) {
        let logger = self.logger
        let now = Date().timeIntervalSince1970
        try await transaction("recording the API \(url)") { connection in
            _ = try await connection.query(
                """
                INSERT INTO dopesync.api_addresses (url, api, recorded_at) VALUES (\(url), \(api), \(now))
                ON CONFLICT (url) DO UPDATE SET api = excluded.api, recorded_at = excluded.recorded_at
                """, logger: logger)
            if adoptUnbound {
                _ = try await connection.query(
                    "UPDATE dopesync.sessions SET api = \(api) WHERE api IS NULL", logger: logger)
            }
        }
    }
}
