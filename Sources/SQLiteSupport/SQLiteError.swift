import CSQLite

/// SQLite's result codes as named constants, so BUSY, FULL and CORRUPT are handled on purpose.
public struct SQLiteResultCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The primary code, without the extended bits (`SQLITE_BUSY_SNAPSHOT` → `SQLITE_BUSY`).
    public var primary: SQLiteResultCode { SQLiteResultCode(rawValue: rawValue & 0xFF) }

    public static let ok = SQLiteResultCode(rawValue: SQLITE_OK)
    public static let error = SQLiteResultCode(rawValue: SQLITE_ERROR)
    public static let busy = SQLiteResultCode(rawValue: SQLITE_BUSY)
    public static let locked = SQLiteResultCode(rawValue: SQLITE_LOCKED)
    public static let readOnly = SQLiteResultCode(rawValue: SQLITE_READONLY)
    public static let ioError = SQLiteResultCode(rawValue: SQLITE_IOERR)
    public static let corrupt = SQLiteResultCode(rawValue: SQLITE_CORRUPT)
    public static let full = SQLiteResultCode(rawValue: SQLITE_FULL)
    public static let cantOpen = SQLiteResultCode(rawValue: SQLITE_CANTOPEN)
    public static let constraint = SQLiteResultCode(rawValue: SQLITE_CONSTRAINT)
    public static let mismatch = SQLiteResultCode(rawValue: SQLITE_MISMATCH)
    public static let misuse = SQLiteResultCode(rawValue: SQLITE_MISUSE)
    public static let notADatabase = SQLiteResultCode(rawValue: SQLITE_NOTADB)
    public static let row = SQLiteResultCode(rawValue: SQLITE_ROW)
    public static let done = SQLiteResultCode(rawValue: SQLITE_DONE)

    public var description: String { String(cString: sqlite3_errstr(rawValue)) }
}

/// An error from SQLite: its result code, SQLite's message, and the statement that failed.
public struct SQLiteError: Error, CustomStringConvertible, Sendable {
    public let code: SQLiteResultCode
    public let message: String
    public let sql: String?
    /// The system's error behind it, where a system call failed (`ENOSPC`: the disk is full); 0
    /// where none did.
    public let systemErrno: Int32

    public init(code: SQLiteResultCode, message: String, sql: String? = nil, systemErrno: Int32 = 0) {
        self.code = code
        self.message = message
        self.sql = sql
        self.systemErrno = systemErrno
    }

    public var description: String {
        var text = "SQLite error \(code.rawValue) (\(code.primary)): \(message)"
        if let sql { text += " in «\(sql)»" }
        return text
    }
}
