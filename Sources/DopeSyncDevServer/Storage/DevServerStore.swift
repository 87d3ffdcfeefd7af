import SQLiteSupport

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The dev server's records and idempotency keys in one SQLite database.
///
/// Every record kind lives in one `records` table: its kind, owning session, direct parent,
/// `clientId` and the validated request fields as JSON text (returned verbatim in the tree).
/// Images keep their metadata only (fileName, role, contentType, size, sha256), never their
/// bytes: the dev server proves what arrived, not where it would be kept.
///
/// Records are never deduplicated by `clientId`: a second POST of the same record without (or
/// with another) idempotency key makes a second row,
/// so tests can count duplicates.
///
/// An actor so that requests waiting for the one SQLite connection suspend rather than block a
/// thread on a lock: under load, blocked threads and futex wake-ups cost more than the SQL.
actor DevServerStore {
    private let database: SQLiteDatabase
    private let retentionSeconds: Int
    /// When keys older than the retention were last purged (seconds since 1970).
    private var lastPurge: Int64 = 0
    private static let purgeIntervalSeconds: Int64 = 3600

    /// Named and append-only, applied by ``SQLiteMigrator`` as the checkpoint store's are.
    private static let migrations: [SQLiteMigration] = [
        SQLiteMigration(
            name: "create records and idempotency keys",
            sql: """
                CREATE TABLE records (
                    id INTEGER PRIMARY KEY,
                    kind TEXT NOT NULL,
                    session_id INTEGER,
                    parent_id INTEGER,
                    client_id TEXT NOT NULL,
                    fields TEXT NOT NULL,
                    created_at INTEGER NOT NULL
                );
                CREATE INDEX records_by_session ON records(session_id, id);
                CREATE INDEX records_by_client_id ON records(kind, client_id);
                CREATE TABLE idempotency_keys (
                    credential TEXT NOT NULL,
                    key TEXT NOT NULL,
                    fingerprint TEXT NOT NULL,
                    status INTEGER NOT NULL,
                    body TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    PRIMARY KEY (credential, key)
                ) WITHOUT ROWID;
                CREATE INDEX idempotency_keys_by_age ON idempotency_keys(created_at);
                """
        )
    ]

    /// Opens (or creates) the database at `path`; `nil` is a private in-memory database.
    init(path: String?, retentionSeconds: Int) throws {
        var options = SQLiteOptions()
        // NORMAL in WAL mode loses at most the last transactions on power loss, never
        // consistency: what a dev server needs, at a fraction of FULL's fsyncs.
        options.synchronous = .normal
        options.reusesPreparedStatements = true
        database = try SQLiteDatabase(path: path ?? ":memory:", options: options)
        self.retentionSeconds = retentionSeconds
        // Static helpers: a synchronous actor initialiser cannot call isolated methods.
        try Self.migrate(database)
        try Self.deleteKeys(database, createdBefore: Self.now() - Int64(retentionSeconds))
    }

    /// Closes the database here, on the actor's executor: released with the last reference, it
    /// would close on whatever thread dropped it, an event loop of the server's among them.
    func close() {
        database.close()
    }

    static func now() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Int64(time.tv_sec)
    }

    private static func migrate(_ database: SQLiteDatabase) throws {
        let now = Double(Self.now())
        // A database made before migrations were recorded by name counted them in user_version.
        let counted: Int = try database.read { try $0.queryFirst("PRAGMA user_version")?["user_version"] } ?? 0
        if counted > 0, try SQLiteMigrator.appliedNames(database).isEmpty {
            try SQLiteMigrator.adopt(Self.migrations.prefix(counted).map(\.name), in: database, now: now)
        }
        try SQLiteMigrator.migrate(database, Self.migrations, now: now)
    }

    /// Deletes keys older than the retention, as of `now` (seconds since 1970).
    func purgeExpiredKeys(now: Int64) throws {
        try Self.deleteKeys(database, createdBefore: now - Int64(retentionSeconds))
        lastPurge = now
    }

    private static func deleteKeys(_ database: SQLiteDatabase, createdBefore cutoff: Int64) throws {
        _ = try database.write { connection in
            try connection.query("DELETE FROM idempotency_keys WHERE created_at < ?", [cutoff])
        }
    }

    // MARK: Idempotency keys

    struct StoredResponse: Sendable {
        let fingerprint: String
        let status: Int
        let body: String

        init(fingerprint: String, status: Int, body: String) {
            self.fingerprint = fingerprint
            self.status = status
            self.body = body
        }

        /// An `idempotency_keys` row's `fingerprint`, `status` and `body`.
        init(_ row: SQLiteRow) throws(SQLiteError) {
            self.init(fingerprint: try row["fingerprint"], status: try row["status"], body: try row["body"])
        }
    }

    func storedResponse(credential: String, key: String) throws -> StoredResponse? {
        try database.read { connection in
            try connection.queryFirst(
                "SELECT fingerprint, status, body FROM idempotency_keys WHERE credential = ? AND key = ?",
                [credential, key]
            ).map { row throws(SQLiteError) in try StoredResponse(row) }
        }
    }

    // MARK: Creating records

    /// Where a new record hangs in the tree.
    enum Parent: Sendable {
        case none
        case session(Int64)
        case chrono(session: Int64, chrono: Int64)
        case group(Int64)
    }

    /// A record ready to insert: its `clientId` and validated fields as JSON.
    struct PreparedRecord: Sendable {
        let clientId: String
        let fieldsJSON: String
    }

    /// What ``createOrReplay(kind:parent:key:prepare:)`` did.
    enum Outcome: Sendable {
        case created(id: Int64, clientId: String)
        /// The key was already stored: nothing was created; the caller compares fingerprints.
        case stored(StoredResponse)
    }

    /// The idempotency key to store with a created record, in the same transaction.
    struct KeyToStore: Sendable {
        let credential: String
        let key: String
        let fingerprint: String
    }

    /// In one transaction: returns the stored response if `key` is already stored; otherwise
    /// prepares the record (validation, which may throw 422), checks that its parent exists
    /// (404), inserts it and stores the key with its 201 response.
    ///
    /// One lock acquisition a request: the lookup, the record and the key commit together.
    func createOrReplay(
        kind: RecordKind,
        parent: Parent,
        key: KeyToStore?,
        prepare: @Sendable () throws -> PreparedRecord
    ) throws -> Outcome {
        let now = Self.now()
        let purgeDue = now - lastPurge >= Self.purgeIntervalSeconds
        if purgeDue { lastPurge = now }
        return try database.write { connection in
            if let key,
                let row = try connection.queryFirst(
                    "SELECT fingerprint, status, body FROM idempotency_keys WHERE credential = ? AND key = ?",
                    [key.credential, key.key])
            {
                return .stored(try StoredResponse(row))
            }
            let record = try prepare()
            let clientId = record.clientId
            var sessionId: Int64? = nil
            var parentId: Int64? = nil
            switch parent {
            case .none:
                break
            case .session(let id):
                try Self.requireRecord(connection, id: id, kind: .session, session: nil, name: "session")
                (sessionId, parentId) = (id, id)
            case .chrono(let session, let chrono):
                try Self.requireRecord(connection, id: session, kind: .session, session: nil, name: "session")
                try Self.requireRecord(connection, id: chrono, kind: .chrono, session: session, name: "chrono session")
                (sessionId, parentId) = (session, chrono)
            case .group(let group):
                guard
                    let row = try connection.queryFirst(
                        "SELECT session_id FROM records WHERE id = ? AND kind = 'group'", [group]),
                    let owner: Int64 = try row["session_id"]
                else { throw APIError.notFound("group \(group) does not exist") }
                (sessionId, parentId) = (owner, group)
            }
            try connection.query(
                "INSERT INTO records (kind, session_id, parent_id, client_id, fields, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                [kind.rawValue, sessionId, parentId, clientId, record.fieldsJSON, now]
            )
            let id = connection.lastInsertRowID
            if case .none = parent {
                // A session is its own tree's root: tree reads select by session_id alone.
                try connection.query("UPDATE records SET session_id = ? WHERE id = ?", [id, id])
            }
            if let key {
                try connection.query(
                    "INSERT INTO idempotency_keys (credential, key, fingerprint, status, body, created_at) VALUES (?, ?, ?, 201, ?, ?)",
                    [key.credential, key.key, key.fingerprint, Self.createdBody(id: id, clientId: clientId), now]
                )
            }
            if purgeDue {
                try connection.query(
                    "DELETE FROM idempotency_keys WHERE created_at < ?", [now - Int64(retentionSeconds)])
            }
            return .created(id: id, clientId: clientId)
        }
    }

    /// The body of a 201: `{"id": ..., "clientId": ...}` (a validated UUID needs no escaping).
    static func createdBody(id: Int64, clientId: String) -> String {
        #"{"id":\#(id),"clientId":"\#(clientId)"}"#
    }

    private static func requireRecord(
        _ connection: SQLiteConnection, id: Int64, kind: RecordKind, session: Int64?, name: String
    ) throws {
        let row: SQLiteRow?
        if let session {
            row = try connection.queryFirst(
                "SELECT 1 FROM records WHERE id = ? AND kind = ? AND session_id = ?", [id, kind.rawValue, session])
        } else {
            row = try connection.queryFirst("SELECT 1 FROM records WHERE id = ? AND kind = ?", [id, kind.rawValue])
        }
        guard row != nil else {
            let suffix = session.map { " in session \($0)" } ?? ""
            throw APIError.notFound("\(name) \(id) does not exist\(suffix)")
        }
    }

    // MARK: Reading

    /// Every session created with this `clientId`, oldest first (duplicates included).
    func sessions(clientId: String) throws -> [(id: Int64, clientId: String)] {
        try database.read { connection in
            try connection.query(
                "SELECT id, client_id FROM records WHERE kind = 'session' AND client_id = ? ORDER BY id", [clientId]
            ).map { row throws(SQLiteError) in (try row["id"], try row["client_id"]) }
        }
    }

    struct StoredRecord: Sendable {
        let id: Int64
        let kind: RecordKind
        let parentId: Int64?
        let clientId: String
        let fieldsJSON: String
    }

    /// A session and everything under it, in creation order; `nil` if there is no such session.
    func sessionRecords(id: Int64) throws -> [StoredRecord]? {
        let records = try database.read { connection in
            try connection.query(
                "SELECT id, kind, parent_id, client_id, fields FROM records WHERE session_id = ? ORDER BY id", [id]
            ).map { row throws(SQLiteError) -> StoredRecord in
                let kindName: String = try row["kind"]
                guard let kind = RecordKind(rawValue: kindName) else {
                    throw SQLiteError(code: .mismatch, message: "records.kind is \"\(kindName)\", not a kind of record")
                }
                return StoredRecord(
                    id: try row["id"], kind: kind, parentId: try row["parent_id"], clientId: try row["client_id"],
                    fieldsJSON: try row["fields"])
            }
        }
        guard records.first?.id == id, records.first?.kind == .session else { return nil }
        return records
    }
}
