/// One result row. Columns are read by name and type, and a column that is missing, NULL where a
/// value is required, or of another type throws an error naming it: a schema change shows up as an
/// error, never as a silent zero (GRDB's `Row` is the model).
///
///     let attempts: Int = try row["attempts"]
///     let nextAttempt: Double? = try row["next_attempt_at"]
public struct SQLiteRow: Sendable {
    /// The column names, as the statement gives them (`AS` names where given).
    public let columns: [String]
    public let values: [SQLiteValue]
    /// The statement that produced the row, for error messages.
    let sql: String

    /// The column named `column`, as `Value`.
    public subscript<Value: SQLiteColumnValue>(_ column: String) -> Value {
        get throws(SQLiteError) {
            guard let index = columns.firstIndex(of: column) else {
                throw SQLiteError(
                    code: .error,
                    message: "no column \(column) in the result (it has \(columns.joined(separator: ", ")))", sql: sql)
            }
            guard let value = Value(sqliteValue: values[index]) else {
                throw SQLiteError(
                    code: .mismatch, message: "column \(column) is \(values[index].kind), not \(Value.sqliteKind)",
                    sql: sql)
            }
            return value
        }
    }
}

/// A Swift type a column can be read as. An `Optional` reads NULL as nil; the others refuse it.
public protocol SQLiteColumnValue {
    /// The value, or nil when the column holds something this type cannot be.
    init?(sqliteValue: SQLiteValue)
    /// How an error names the type ("an integer").
    static var sqliteKind: String { get }
}

extension Int64: SQLiteColumnValue {
    public init?(sqliteValue: SQLiteValue) {
        guard case .integer(let value) = sqliteValue else { return nil }
        self = value
    }
    public static var sqliteKind: String { "an integer" }
}

extension Int: SQLiteColumnValue {
    public init?(sqliteValue: SQLiteValue) {
        guard let value = Int64(sqliteValue: sqliteValue) else { return nil }
        self.init(value)
    }
    public static var sqliteKind: String { "an integer" }
}

extension Int32: SQLiteColumnValue {
    public init?(sqliteValue: SQLiteValue) {
        guard let value = Int64(sqliteValue: sqliteValue) else { return nil }
        self.init(exactly: value)
    }
    public static var sqliteKind: String { "a 32-bit integer" }
}

extension Bool: SQLiteColumnValue {
    public init?(sqliteValue: SQLiteValue) {
        guard let value = Int64(sqliteValue: sqliteValue) else { return nil }
        self = value != 0
    }
    public static var sqliteKind: String { "a boolean (an integer)" }
}

extension Double: SQLiteColumnValue {
    /// REAL, or INTEGER (SQLite stores a REAL column's whole numbers as integers when it can).
    public init?(sqliteValue: SQLiteValue) {
        switch sqliteValue {
        case .real(let value): self = value
        case .integer(let value): self = Double(value)
        default: return nil
        }
    }
    public static var sqliteKind: String { "a number" }
}

extension String: SQLiteColumnValue {
    public init?(sqliteValue: SQLiteValue) {
        guard case .text(let value) = sqliteValue else { return nil }
        self = value
    }
    public static var sqliteKind: String { "text" }
}

extension Array: SQLiteColumnValue where Element == UInt8 {
    public init?(sqliteValue: SQLiteValue) {
        guard case .blob(let value) = sqliteValue else { return nil }
        self = value
    }
    public static var sqliteKind: String { "a blob" }
}

extension Optional: SQLiteColumnValue where Wrapped: SQLiteColumnValue {
    public init?(sqliteValue: SQLiteValue) {
        if case .null = sqliteValue {
            self = .none
            return
        }
        guard let value = Wrapped(sqliteValue: sqliteValue) else { return nil }
        self = .some(value)
    }
    public static var sqliteKind: String { "\(Wrapped.sqliteKind) or NULL" }
}

extension SQLiteValue {
    /// How an error names what the column holds.
    var kind: String {
        switch self {
        case .null: "NULL"
        case .integer(let value): "the integer \(value)"
        case .real(let value): "the real \(value)"
        case .text: "text"
        case .blob(let bytes): "a blob of \(bytes.count) bytes"
        }
    }
}
