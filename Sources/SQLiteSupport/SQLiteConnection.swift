import CSQLite
import ThreadRules

#if canImport(Glibc)
    import Glibc
#endif

/// A connection lent to a closure by ``SQLiteDatabase/read(_:)`` or ``SQLiteDatabase/write(_:)``.
///
/// It must not escape that closure: the database's lock is held only while the closure runs.
public struct SQLiteConnection {
    let handle: OpaquePointer
    /// The database's prepared statements kept for reuse, when it keeps them.
    let statements: PreparedStatements?

    /// Rolls back the transaction, if one is still open: after some errors (a full disk, I/O)
    /// SQLite has already rolled it back, and a ROLLBACK then is an error of its own. A rollback
    /// that fails leaves nothing committed, which is all a caller about to throw needs.
    func rollBackIfOpen() {
        guard sqlite3_get_autocommit(handle) == 0 else { return }
        BlockingCalls.check("SQLite: ROLLBACK")
        _ = sqlite3_exec(handle, "ROLLBACK", nil, nil, nil)
    }

    /// Runs one or more statements that take no parameters and return no rows (DDL, PRAGMAs).
    public func execute(_ sql: String) throws(SQLiteError) {
        BlockingCalls.check("SQLite: \(sql)")
        var errorMessage: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if code != SQLITE_OK {
            let system = Self.systemErrno(handle, code: code)
            let message =
                errorMessage.map {
                    String(cString: $0) + (system != 0 ? " (\(String(cString: strerror(system))))" : "")
                }
                ?? lastErrorMessage
            sqlite3_free(errorMessage)
            throw SQLiteError(code: SQLiteResultCode(rawValue: code), message: message, sql: sql, systemErrno: system)
        }
    }

    /// Runs one statement with parameters and returns every row it produced.
    @discardableResult
    public func query(_ sql: String, _ arguments: [any SQLiteBindable] = []) throws(SQLiteError) -> [SQLiteRow] {
        var rows: [SQLiteRow] = []
        try forEachRow(sql, arguments) { rows.append($0) }
        return rows
    }

    /// Runs one statement with parameters and returns its first row, if any.
    public func queryFirst(_ sql: String, _ arguments: [any SQLiteBindable] = []) throws(SQLiteError) -> SQLiteRow? {
        try query(sql, arguments).first
    }

    /// Runs one statement and hands each row to `body` without collecting them.
    public func forEachRow(
        _ sql: String,
        _ arguments: [any SQLiteBindable] = [],
        _ body: (SQLiteRow) throws(SQLiteError) -> Void
    ) throws(SQLiteError) {
        BlockingCalls.check("SQLite: \(sql)")
        // Reuse a prepared statement when the database keeps them: parsing and planning cost more
        // than running the short statements of a checkpoint. Taken out of the cache while in use,
        // so a nested query with the same text prepares its own.
        var statement = statements?.take(sql)
        if statement == nil {
            let flags = statements == nil ? 0 : UInt32(SQLITE_PREPARE_PERSISTENT)
            try check(sqlite3_prepare_v3(handle, sql, -1, flags, &statement, nil), sql: sql)
        }
        guard let statement else { return }  // an empty statement
        defer {
            if let statements {
                sqlite3_reset(statement)
                sqlite3_clear_bindings(statement)
                statements.giveBack(statement, for: sql)
            } else {
                sqlite3_finalize(statement)
            }
        }

        for (offset, argument) in arguments.enumerated() {
            try check(bind(argument.sqliteValue, at: Int32(offset + 1), in: statement), sql: sql)
        }
        let columnCount = sqlite3_column_count(statement)
        // The names once per statement run, shared by its rows (an array is copied on write only).
        var columns: [String]? = nil
        while true {
            let code = sqlite3_step(statement)
            if code == SQLITE_DONE { return }
            guard code == SQLITE_ROW else {
                try check(code, sql: sql)
                return
            }
            var values: [SQLiteValue] = []
            values.reserveCapacity(Int(columnCount))
            for column in 0..<columnCount {
                values.append(Self.columnValue(statement, column))
            }
            if columns == nil {
                columns = (0..<columnCount).map { String(cString: sqlite3_column_name(statement, $0)) }
            }
            try body(SQLiteRow(columns: columns!, values: values, sql: sql))
        }
    }

    /// The rowid of the last row inserted through this connection.
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// How many rows the last INSERT, UPDATE or DELETE changed.
    public var changes: Int { Int(sqlite3_changes(handle)) }

    var lastErrorMessage: String { Self.errorMessage(handle) }

    /// SQLite's message for the last error on `handle`, and, where the system refused one of its
    /// calls, the system's words: "disk I/O error" alone hides a full disk (ENOSPC), which an
    /// operator fixes differently from a failing one.
    static func errorMessage(_ handle: OpaquePointer) -> String {
        let message = String(cString: sqlite3_errmsg(handle))
        let system = systemErrno(handle, code: sqlite3_extended_errcode(handle))
        return system == 0 ? message : "\(message) (\(String(cString: strerror(system))))"
    }

    /// The system's error behind a failure with `code`, where one is (an I/O error, a full disk,
    /// a file that cannot be opened); 0 otherwise, since an older one may linger.
    static func systemErrno(_ handle: OpaquePointer, code: Int32) -> Int32 {
        [SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN].contains(code & 0xFF) ? sqlite3_system_errno(handle) : 0
    }

    func check(_ code: Int32, sql: String? = nil) throws(SQLiteError) {
        guard code == SQLITE_OK || code == SQLITE_ROW || code == SQLITE_DONE else {
            throw SQLiteError(
                code: SQLiteResultCode(rawValue: code), message: lastErrorMessage, sql: sql,
                systemErrno: Self.systemErrno(handle, code: code))
        }
    }

    private func bind(_ value: SQLiteValue, at index: Int32, in statement: OpaquePointer) -> Int32 {
        switch value {
        case .null:
            return sqlite3_bind_null(statement, index)
        case .integer(let value):
            return sqlite3_bind_int64(statement, index, value)
        case .real(let value):
            return sqlite3_bind_double(statement, index, value)
        case .text(let value):
            return sqlite3_bind_text(statement, index, value, -1, SQLiteConnection.transient)
        case .blob(let value):
            return value.withUnsafeBytes { buffer in
                sqlite3_bind_blob64(
                    statement, index, buffer.baseAddress, sqlite3_uint64(buffer.count), SQLiteConnection.transient)
            }
        }
    }

    private static func columnValue(_ statement: OpaquePointer, _ column: Int32) -> SQLiteValue {
        switch sqlite3_column_type(statement, column) {
        case SQLITE_INTEGER:
            return .integer(sqlite3_column_int64(statement, column))
        case SQLITE_FLOAT:
            return .real(sqlite3_column_double(statement, column))
        case SQLITE_TEXT:
            guard let text = sqlite3_column_text(statement, column) else { return .text("") }
            return .text(String(cString: text))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(statement, column))
            guard count > 0, let bytes = sqlite3_column_blob(statement, column) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: bytes, count: count)))
        default:
            return .null
        }
    }

    // SQLITE_TRANSIENT: SQLite copies the bound bytes before the call returns.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
}
