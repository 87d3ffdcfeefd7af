import DopeSyncBundle
import DopeSyncSupport
import Foundation
import SQLiteSupport

/// Everything the spool's file holds, for `dopesync migrate --to URL`.
extension CheckpointStore {
    /// Whether the spool's SQLite file holds steps never migrated (`migrate --to` marks the file
    /// moved), read from a private copy: a spool bound to a shared database without them would
    /// send every step they record again. Throws when the file is there but cannot be read, since
    /// what it holds is then unknown.
    public static func holdsUnmigratedSteps(_ spool: Spool) throws(CheckpointError) -> Bool {
        guard FileManager.default.fileExists(atPath: spool.databasePath) else { return false }
        let file = try CheckpointStore(readingSnapshotOf: spool.databasePath)
        return try file.read("looking for steps not migrated") { connection in
            func hasTable(_ name: String) throws -> Bool {
                try connection.queryFirst(
                    "SELECT 1 AS one FROM sqlite_master WHERE type = 'table' AND name = ?", [name]) != nil
            }
            if try hasTable("store_meta"),
                try connection.queryFirst("SELECT 1 AS one FROM store_meta WHERE key = 'moved_to'") != nil
            {
                return false
            }
            return try hasTable("steps") && connection.queryFirst("SELECT 1 AS one FROM steps LIMIT 1") != nil
        }
    }

    /// Every step of every session, in the order they were first sent.
    public func allSteps() throws(CheckpointError) -> [StepRecord] {
        try read("reading every step") { connection in
            try connection.query(
                """
                SELECT session_id, step_key, idempotency_key, request_fingerprint, content_digest, state, server_id, sent_at, done_at, bundle_name
                FROM steps ORDER BY rowid
                """
            ).map { row in try StepRecord(row) }
        }
    }
}

extension StepRecord {
    /// A `steps` row, read by column name.
    init(_ row: SQLiteRow) throws {
        self.init(
            sessionID: try row["session_id"], stepKey: try row["step_key"],
            idempotencyKey: try row["idempotency_key"], requestFingerprint: try row["request_fingerprint"],
            contentDigest: try row["content_digest"], state: try StepRecord.State(row["state"]),
            serverID: try row["server_id"], sentAt: Date(timeIntervalSince1970: try row["sent_at"]),
            doneAt: (try row["done_at"] as Double?).map(Date.init(timeIntervalSince1970:)),
            bundleName: try row["bundle_name"])
    }
}
