import CSQLite

/// Prepared statements kept by their SQL text, for a database opened with
/// ``SQLiteOptions/reusesPreparedStatements``.
///
/// Not Sendable: it lives inside the database's lock, with the handle its statements belong to.
final class PreparedStatements {
    /// Enough for every distinct statement a store runs; a statement past it is prepared each time.
    static let capacity = 64
    private var bySQL: [String: OpaquePointer] = [:]

    func take(_ sql: String) -> OpaquePointer? { bySQL.removeValue(forKey: sql) }

    /// Keeps `statement` (already reset) for the next use of `sql`, or finalises it.
    func giveBack(_ statement: OpaquePointer, for sql: String) {
        if bySQL[sql] == nil, bySQL.count < Self.capacity {
            bySQL[sql] = statement
        } else {
            sqlite3_finalize(statement)
        }
    }

    /// Before the connection closes: SQLite keeps a connection with live statements open.
    func finalizeAll() {
        for statement in bySQL.values { sqlite3_finalize(statement) }
        bySQL.removeAll()
    }
}
