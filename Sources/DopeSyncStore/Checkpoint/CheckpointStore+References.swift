import DopeSyncBundle
import DopeSyncSupport
import Foundation
import SQLiteSupport

/// A reference list as last read from the server: revalidated with its ETag the next time.
public struct CachedReferenceList: Sendable, Equatable {
    public let list: ReferenceList
    /// The `ETag` the server sent with it; nil when it sent none (then it is read in full).
    public let etag: String?
    /// The list's JSON as the server sent it.
    public let body: [UInt8]

    package init(list: ReferenceList, etag: String?, body: [UInt8]) {
        self.list = list
        self.etag = etag
        self.body = body
    }
}

extension CheckpointStore {
    /// Every list as last read, by list; a list never read is absent.
    public func referenceLists() throws(CheckpointError) -> [ReferenceList: CachedReferenceList] {
        try read("reading the cached reference lists") { connection in
            var lists: [ReferenceList: CachedReferenceList] = [:]
            try connection.forEachRow("SELECT name, etag, body FROM reference_lists") { row throws(SQLiteError) in
                guard let list = ReferenceList(rawValue: try row["name"]) else { return }  // a newer dopesync's
                let body: String = try row["body"]
                lists[list] = CachedReferenceList(list: list, etag: try row["etag"], body: Array(body.utf8))
            }
            return lists
        }
    }

    /// Keeps a list the server sent in full (200), replacing what was kept of it.
    public func saveReferenceList(_ list: ReferenceList, etag: String?, body: [UInt8], now: Date = Date())
        throws(CheckpointError)
    {
        try write("keeping the list \(list.path)") { connection in
            try connection.query(
                """
                INSERT INTO reference_lists (name, etag, body, read_at) VALUES (?, ?, ?, ?)
                ON CONFLICT (name) DO UPDATE SET etag = excluded.etag, body = excluded.body, read_at = excluded.read_at
                """,
                [list.rawValue, etag, String(decoding: body, as: UTF8.self), now.timeIntervalSince1970])
        }
    }

    /// The ids of every list kept, by kind (for `inspect`); kinds of lists never read are absent.
    public func cachedReferenceIDs() throws(CheckpointError) -> ReferenceIDs {
        var ids = ReferenceIDs()
        for (list, cached) in try referenceLists() {
            if let parsed = list.ids(fromBody: cached.body) { ids.add(parsed) }
        }
        return ids
    }
}
