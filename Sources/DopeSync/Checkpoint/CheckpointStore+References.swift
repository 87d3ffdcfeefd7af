import Foundation
import SQLiteSupport

/// A reference list as last read from the server: revalidated with its ETag the next time.
public struct CachedReferenceList: Sendable, Equatable {
    public let list: ReferenceList
    /// The `ETag` the server sent with it; nil when it sent none (then it is read in full).
    public let etag: String?
    /// The list's JSON as the server sent it.
    public let body: [UInt8]
    public let readAt: Date
}

extension CheckpointStore {
    /// The list as last read, if it ever was.
    public func referenceList(_ list: ReferenceList) throws(CheckpointError) -> CachedReferenceList? {
        try read("reading the cached list \(list.path)") { connection in
            try connection.queryFirst(
                "SELECT etag, body, read_at FROM reference_lists WHERE name = ?", [list.rawValue]
            ).map { row throws(SQLiteError) in
                let body: String = try row["body"]
                return CachedReferenceList(
                    list: list, etag: try row["etag"], body: Array(body.utf8),
                    readAt: Date(timeIntervalSince1970: try row["read_at"]))
            }
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

    /// Marks a list revalidated (304): the body kept is still the server's.
    public func touchReferenceList(_ list: ReferenceList, now: Date = Date()) throws(CheckpointError) {
        try write("revalidating the list \(list.path)") { connection in
            try connection.query(
                "UPDATE reference_lists SET read_at = ? WHERE name = ?", [now.timeIntervalSince1970, list.rawValue])
        }
    }

    /// The ids of every list kept, by kind (for `inspect`); kinds of lists never read are absent.
    public func cachedReferenceIDs() throws(CheckpointError) -> ReferenceIDs {
        var ids = ReferenceIDs()
        for list in ReferenceList.allCases {
            guard let cached = try referenceList(list), let parsed = list.ids(fromBody: cached.body) else { continue }
            ids.add(parsed)
        }
        return ids
    }
}
