import DopeSyncBundle
import DopeSyncSupport
import Foundation
import SQLiteSupport

/// The `store_meta`, `sessions` and `api_addresses` tables: what the checkpoints are bound to.
extension CheckpointStore {
    // MARK: - The store itself

    /// This file's own id, which the spool's binding names.
    public func storeID() throws(CheckpointError) -> String {
        try read("reading the store's id") { connection in
            guard let row = try connection.queryFirst("SELECT value FROM store_meta WHERE key = 'store_id'") else {
                throw SQLiteError(code: .error, message: "store_meta has no store_id", sql: "")
            }
            return try row["value"] as String
        }
    }

    /// Where `migrate` moved this file's checkpoints (a PostgreSQL store's description); nil while
    /// the file is in use. A moved file is refused by every command.
    public func movedTo() throws(CheckpointError) -> String? {
        try read("reading the store's state") { connection in
            try connection.queryFirst("SELECT value FROM store_meta WHERE key = 'moved_to'").map {
                try $0["value"] as String
            }
        }
    }

    /// Marks the file as moved to `store`: no run, status or requeue uses it again.
    public func markMoved(to store: String) throws(CheckpointError) {
        try write("marking the store as moved") { connection in
            try connection.query(
                "INSERT INTO store_meta (key, value) VALUES ('moved_to', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [store])
        }
    }

    // MARK: - Sessions

    /// Binds a claimed bundle's session, as ``SessionBinding/decide(existing:producer:api:)`` says.
    static func bindSession(
        _ connection: SQLiteConnection, _ sessionID: String, producer: Producer, api: String, now: Date
    ) throws(SQLiteError) -> SessionBindingDecision {
        let existing = try connection.queryFirst(
            "SELECT api, owner_uid, owner_name FROM sessions WHERE session_id = ?", [sessionID]
        ).map { row throws(SQLiteError) in
            try SessionBinding(row)
        }
        let decision = SessionBinding.decide(existing: existing, producer: producer, api: api)
        guard case .bind(let binding, let forgetServerIDs) = decision else { return decision }
        try connection.query(
            """
            INSERT INTO sessions (session_id, api, owner_uid, owner_name, first_seen) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT (session_id) DO UPDATE SET api = excluded.api, owner_uid = excluded.owner_uid, owner_name = excluded.owner_name
            """,
            [
                sessionID, binding.api, binding.owner.map { Int64($0.uid) }, binding.owner?.name,
                now.timeIntervalSince1970,
            ])
        if forgetServerIDs {
            try connection.query(
                "UPDATE steps SET state = 'sent', server_id = NULL, done_at = NULL WHERE session_id = ? AND state = 'done'",
                [sessionID])
        }
        return decision
    }

    /// These sessions' bindings, by id: for `status` (the API of a listed bundle's checkpoints).
    public func sessionBindings(of sessionIDs: [String]) throws(CheckpointError) -> [String: SessionBinding] {
        try read("reading the sessions") { connection in
            var bindings: [String: SessionBinding] = [:]
            for id in Set(sessionIDs) {
                try connection.forEachRow(Self.sessionsSQL + " WHERE session_id = ?", [id]) { row throws(SQLiteError) in
                    bindings[id] = try SessionBinding(row)
                }
            }
            return bindings
        }
    }

    /// Every session's binding, by id (`migrate`).
    public func allSessionBindings() throws(CheckpointError) -> [String: SessionBinding] {
        try read("reading the sessions") { connection in
            var bindings: [String: SessionBinding] = [:]
            try connection.forEachRow(Self.sessionsSQL) { row throws(SQLiteError) in
                bindings[try row["session_id"]] = try SessionBinding(row)
            }
            return bindings
        }
    }

    private static let sessionsSQL = "SELECT session_id, api, owner_uid, owner_name FROM sessions"

    // MARK: - APIs

    /// The APIs the store knows: each URL a run used with the API it is, and, `countingSessions`,
    /// how many sessions have steps done against each (a look at every session: asked only of a
    /// URL the store does not know yet).
    public func apiBook(countingSessions: Bool = true) throws(CheckpointError) -> APIBook {
        try read("reading the APIs") { connection in
            var book = APIBook()
            try connection.forEachRow("SELECT url, api FROM api_addresses") { row throws(SQLiteError) in
                book.addresses[try row["url"]] = try row["api"] as String
            }
            guard countingSessions else { return book }
            try connection.forEachRow(APIBook.sessionsWithStepsDone(schema: "")) {
                row throws(SQLiteError) in
                let api: String? = try row["api"]
                book.sessions[api ?? APIBook.unbound] = try row["sessions"] as Int
            }
            return book
        }
    }

    /// Records that `url` is the API `api` (itself, or an earlier URL of it), and gives the
    /// sessions from before APIs were recorded to `api` when `adoptUnbound`.
    public func recordAPIAddress(_ url: String, api: String, adoptUnbound: Bool, now: Date = Date())
        throws(CheckpointError)
    {
        try write("recording the API \(url)") { connection in
            try connection.query(
                """
                INSERT INTO api_addresses (url, api, recorded_at) VALUES (?, ?, ?)
                ON CONFLICT (url) DO UPDATE SET api = excluded.api, recorded_at = excluded.recorded_at
                """, [url, api, now.timeIntervalSince1970])
            if adoptUnbound { try connection.query("UPDATE sessions SET api = ? WHERE api IS NULL", [api]) }
        }
    }
}

extension SessionBinding {
    init(_ row: SQLiteRow) throws(SQLiteError) {
        let uid: Int64? = try row["owner_uid"]
        let name: String? = try row["owner_name"]
        self.init(
            api: try row["api"],
            owner: uid.map { Producer(uid: UInt32(truncatingIfNeeded: $0), name: name ?? "uid \($0)") })
    }
}
