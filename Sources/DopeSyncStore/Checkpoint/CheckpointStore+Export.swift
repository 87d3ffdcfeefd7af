import DopeSyncBundle
import DopeSyncSupport
import Foundation
import SQLiteSupport

/// Everything the spool's file holds, for `dopesync migrate --to URL`.
extension CheckpointStore {
    /// Whether the spool's SQLite file holds a step's checkpoint, read from a private copy: steps
    /// a PostgreSQL database must be given (`migrate --to`) before the spool is bound to it.
    public static func fileHoldsSteps(_ spool: Spool) -> Bool {
        guard FileManager.default.fileExists(atPath: spool.databasePath),
            let file = try? CheckpointStore(readingSnapshotOf: spool.databasePath)
        else { return false }
        let found = try? file.read("looking for a step") { connection in
            try connection.queryFirst("SELECT 1 AS one FROM steps LIMIT 1") != nil
        }
        return found ?? false
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
