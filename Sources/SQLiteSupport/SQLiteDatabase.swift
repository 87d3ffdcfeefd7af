import CSQLite
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

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

    public init(code: SQLiteResultCode, message: String, sql: String? = nil) {
        self.code = code
        self.message = message
        self.sql = sql
    }

    public var description: String {
        var text = "SQLite error \(code.rawValue) (\(code.primary)): \(message)"
        if let sql { text += " in «\(sql)»" }
        return text
    }
}

/// A value bound to, or read from, a statement.
public enum SQLiteValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
}

public protocol SQLiteBindable {
    var sqliteValue: SQLiteValue { get }
}
extension Int: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(Int64(self)) } }
extension Int64: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(self) } }
extension Double: SQLiteBindable { public var sqliteValue: SQLiteValue { .real(self) } }
extension String: SQLiteBindable { public var sqliteValue: SQLiteValue { .text(self) } }
extension Bool: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(self ? 1 : 0) } }
extension SQLiteValue: SQLiteBindable { public var sqliteValue: SQLiteValue { self } }
extension Optional: SQLiteBindable where Wrapped: SQLiteBindable {
    public var sqliteValue: SQLiteValue { self?.sqliteValue ?? .null }
}

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
        _ = sqlite3_exec(handle, "ROLLBACK", nil, nil, nil)
    }

    /// Runs one or more statements that take no parameters and return no rows (DDL, PRAGMAs).
    public func execute(_ sql: String) throws(SQLiteError) {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if code != SQLITE_OK {
            let message = errorMessage.map { String(cString: $0) } ?? lastErrorMessage
            sqlite3_free(errorMessage)
            throw SQLiteError(code: SQLiteResultCode(rawValue: code), message: message, sql: sql)
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

    var lastErrorMessage: String { String(cString: sqlite3_errmsg(handle)) }

    func check(_ code: Int32, sql: String? = nil) throws(SQLiteError) {
        guard code == SQLITE_OK || code == SQLITE_ROW || code == SQLITE_DONE else {
            throw SQLiteError(code: SQLiteResultCode(rawValue: code), message: lastErrorMessage, sql: sql)
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

/// How a database file is opened.
public struct SQLiteOptions: Sendable {
    public enum Synchronous: String, Sendable {
        case off = "OFF"
        case normal = "NORMAL"
        case full = "FULL"
    }

    /// Write-ahead logging: readers do not block the writer.
    public var walJournal: Bool = true
    public var synchronous: Synchronous = .normal
    /// How long a statement waits for another connection's lock before SQLITE_BUSY.
    public var busyTimeoutMilliseconds: Int32 = 10_000
    /// A file locked with `flock(2)` around every write transaction and around closing.
    ///
    /// SQLite 3.40 (Debian 12) can corrupt the WAL index when two processes write or checkpoint
    /// at the same instant (the "WAL-reset" bug, fixed in 3.44). Serialising writers across
    /// processes with one advisory lock closes that window; readers are not affected.
    public var writeLockPath: String? = nil
    /// Keeps each statement prepared after its first use and reuses it (statements are matched
    /// by their SQL text, so bind values as parameters). For a process that runs the same short
    /// transactions many times, such as the worker's one checkpoint commit per upload step.
    public var reusesPreparedStatements = false
    /// The page size of a database this opening creates (nil: SQLite's, 4096). An existing file
    /// keeps its own. In WAL mode every commit appends each page it changed in full, so a small
    /// page makes a small commit, for a file whose transactions touch a few short rows each.
    public var pageSizeOfNewDatabase: Int? = nil
    /// How large the WAL may grow, in bytes of pages, before a commit checkpoints it (nil: SQLite's
    /// 1000 pages). Counted in bytes because the page size is the file's: one made before
    /// ``pageSizeOfNewDatabase`` keeps its own.
    public var walAutocheckpointBytes: Int? = nil
    /// With `readOnly`: read the main file as it is on disk, without its WAL, creating and locking
    /// nothing (SQLite's `immutable=1`). For a reader that must not write beside the file (another
    /// user, root, a read-only file system); commits still in the WAL are not seen.
    public var immutable = false

    public init() {}
}

/// One SQLite database file, used from any task; a connection is lent to one closure at a time.
public final class SQLiteDatabase: Sendable {
    public let path: String
    // Safety: the handle and its statements are only used inside `lock`, so no two threads use them at once.
    private nonisolated(unsafe) let handle: OpaquePointer
    private nonisolated(unsafe) let statements: PreparedStatements?
    private let lock = Mutex<Void>(())
    private let writeLock: WriteLock?
    private let busyTimeoutMilliseconds: Int32

    /// `file:PATH?immutable=1`, the path percent-encoded as a URI's must be.
    static func immutableURI(_ path: String) -> String {
        var encoded = ""
        for byte in path.utf8 {
            let scalar = Unicode.Scalar(byte)
            if byte < 0x80
                && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar)
                    || "/-_.~".unicodeScalars.contains(scalar))
            {
                encoded.unicodeScalars.append(scalar)
            } else {
                encoded += "%" + String(byte, radix: 16, uppercase: true).leftPaddedHex
            }
        }
        return "file:\(encoded)?immutable=1"
    }

    /// Opens (and creates, unless `readOnly`) the database at `path`.
    public init(path: String, options: SQLiteOptions = SQLiteOptions(), readOnly: Bool = false) throws(SQLiteError) {
        self.path = path
        _ = Self.configureLibraryOnce
        var handle: OpaquePointer?
        let flags =
            (readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) | SQLITE_OPEN_NOMUTEX
            // A database reached through a symlink is refused (SQLite 3.31+): whoever made the link
            // would choose what the store says.
            | SQLITE_OPEN_NOFOLLOW
        let snapshot = readOnly && options.immutable
        let name = snapshot ? Self.immutableURI(path) : path
        let code = sqlite3_open_v2(name, &handle, flags | (snapshot ? SQLITE_OPEN_URI : 0), nil)
        guard code == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
            sqlite3_close_v2(handle)
            throw SQLiteError(code: SQLiteResultCode(rawValue: code), message: "cannot open \(path): \(message)")
        }
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, options.busyTimeoutMilliseconds)

        var writeLock: WriteLock? = nil
        if let lockPath = options.writeLockPath {
            // Never through a symlink, and readable by nobody else: it sits beside the database.
            let descriptor = open(lockPath, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else {
                sqlite3_close_v2(handle)
                throw SQLiteError(code: .cantOpen, message: "cannot open lock file \(lockPath): errno \(errno)")
            }
            writeLock = WriteLock(
                descriptor: descriptor, path: lockPath, timeoutMilliseconds: max(options.busyTimeoutMilliseconds, 0))
        }

        // Set up the connection before `self` is complete, so a failure here closes it exactly once.
        do {
            let connection = SQLiteConnection(handle: handle, statements: nil)
            try connection.execute("PRAGMA foreign_keys = ON")
            if !readOnly {
                // `synchronous` belongs to this connection; only switching the file to WAL writes,
                // so a database already in WAL opens without the write lock (and opens even while
                // another process holds it).
                try connection.execute("PRAGMA synchronous = \(options.synchronous.rawValue)")
                // Only takes effect before the file's first write (the switch to WAL below, under the
                // write lock); a file that exists keeps its page size.
                if let size = options.pageSizeOfNewDatabase { try connection.execute("PRAGMA page_size = \(size)") }
                let mode: String? = try connection.queryFirst("PRAGMA journal_mode")?["journal_mode"]
                if options.walJournal && mode?.lowercased() != "wal" {
                    try writeLock?.acquire()
                    defer { writeLock?.release() }
                    try connection.execute("PRAGMA journal_mode = WAL")
                }
                if let bytes = options.walAutocheckpointBytes {
                    let pageSize: Int = try connection.queryFirst("PRAGMA page_size")?["page_size"] ?? 4096
                    try connection.execute("PRAGMA wal_autocheckpoint = \(max(bytes / pageSize, 1))")
                }
            }
        } catch {
            sqlite3_close_v2(handle)
            throw error
        }
        self.handle = handle
        self.writeLock = writeLock
        self.busyTimeoutMilliseconds = options.busyTimeoutMilliseconds
        self.statements = options.reusesPreparedStatements ? PreparedStatements() : nil
    }

    /// Process-wide settings, before SQLite initialises itself at the first open (later, SQLite
    /// refuses them and keeps its defaults, which is harmless).
    private static let configureLibraryOnce: Void = {
        // The worker's checkpoints allocate on every statement; the statistics are never read.
        _ = dopesync_sqlite3_memory_statistics_off()
    }()

    deinit {
        closeHandle()
    }

    private func closeHandle() {
        lock.withLock { _ in statements?.finalizeAll() }
        guard let writeLock else {
            sqlite3_close_v2(handle)
            return
        }
        // Closing the last connection checkpoints the WAL: a write, so it takes the write lock.
        // If another process keeps it past the timeout, close without that checkpoint (the WAL
        // stays for the next writer to fold in) rather than write unlocked or wait for good.
        do {
            try writeLock.acquire()
            sqlite3_close_v2(handle)
            writeLock.release()
        } catch {
            dopesync_sqlite3_no_checkpoint_on_close(handle)
            sqlite3_close_v2(handle)
        }
    }

    /// Lends the connection to `body` for reads (no transaction is opened).
    public func read<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        try withConnection(body)
    }

    /// Runs `body` in one `BEGIN IMMEDIATE` transaction: all of it commits, or none of it.
    ///
    /// IMMEDIATE takes the write lock up front, so a transaction never fails half-way with
    /// SQLITE_BUSY on its first write; it waits (busy timeout) instead.
    public func write<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        try withConnection { connection in
            try writeLock?.acquire()
            defer { writeLock?.release() }
            // Prepared statements rather than `execute`: they are reused when the database keeps them.
            try connection.query("BEGIN IMMEDIATE")
            do {
                let result = try body(connection)
                try connection.query("COMMIT")
                return result
            } catch {
                connection.rollBackIfOpen()
                throw error
            }
        }
    }

    /// ``write(_:)``, but only if nothing would make this thread wait: the connection is free, the
    /// cross-process write lock is free, and SQLite's own lock is free. Returns nil, having done
    /// nothing, when any of them is taken. For a caller that must not block its thread (an event
    /// loop) and has somewhere else to do the write when it would wait.
    public func writeIfAvailable<T>(_ body: (SQLiteConnection) throws -> T) throws -> T? {
        var outcome: Result<T, any Error>?? = nil
        lock.withLockIfAvailable { _ in
            outcome = { () -> Result<T, any Error>? in
                if let writeLock, !writeLock.tryAcquire() { return nil }
                defer { writeLock?.release() }
                let connection = SQLiteConnection(handle: handle, statements: statements)
                // No waiting for SQLite's lock either (another program, such as the sqlite3 shell).
                sqlite3_busy_timeout(handle, 0)
                defer { sqlite3_busy_timeout(handle, busyTimeoutMilliseconds) }
                do throws(SQLiteError) {
                    try connection.query("BEGIN IMMEDIATE")
                } catch  where error.code.primary == .busy {
                    return nil
                } catch {
                    return .failure(error)
                }
                return Result {
                    do {
                        let result = try body(connection)
                        try connection.query("COMMIT")
                        return result
                    } catch {
                        connection.rollBackIfOpen()  // as in write(_:)
                        throw error
                    }
                }
            }()
        }
        guard let attempt = outcome, let result = attempt else { return nil }
        return try result.get()
    }

    private func withConnection<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        // The result stays on this task; only the lock is shared.
        var outcome: Result<T, any Error>?
        lock.withLock { _ in
            outcome = Result { try body(SQLiteConnection(handle: handle, statements: statements)) }
        }
        return try outcome!.get()
    }
}

/// The cross-process write lock (`SQLiteOptions.writeLockPath`), taken with `flock(2)` but waited
/// for no longer than the busy timeout: a process stopped or hung while it holds the lock must not
/// hold every other writer for good. Past the timeout a write fails with SQLITE_BUSY, as a
/// statement waiting for SQLite's own locks does.
///
/// Once a wait has run out, later writes try the lock once instead of waiting again: a run that
/// stops because of a stuck lock then stops in one timeout, not one for each write still to come
/// (giving bundles back, recording the run). If the holder has let go, that one try succeeds.
final class WriteLock: Sendable {
    let descriptor: Int32
    let path: String
    let timeoutMilliseconds: Int32
    private let ranOut = Atomic<Bool>(false)

    /// Takes ownership of `descriptor`: it is closed with the lock.
    init(descriptor: Int32, path: String, timeoutMilliseconds: Int32) {
        self.descriptor = descriptor
        self.path = path
        self.timeoutMilliseconds = timeoutMilliseconds
    }

    deinit { close(descriptor) }

    func acquire() throws(SQLiteError) {
        // The usual case, once per transaction: free at once, no clock read.
        if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return lockTaken() }
        let wait = ranOut.load(ordering: .relaxed) ? 0 : timeoutMilliseconds
        let deadline = ContinuousClock.now + .milliseconds(Int(wait))
        var pause: UInt32 = 100  // microseconds, doubling to 5 ms: often enough to find a busy peer's gaps
        while true {
            let failure = errno
            guard failure == EWOULDBLOCK || failure == EINTR else {
                throw SQLiteError(code: .ioError, message: "cannot lock \(path): errno \(failure)")
            }
            guard ContinuousClock.now < deadline else {
                ranOut.store(true, ordering: .relaxed)
                throw SQLiteError(
                    code: .busy,
                    message: "another process held the write lock \(path) for more than \(timeoutMilliseconds) ms")
            }
            usleep(pause)
            pause = min(pause * 2, 5_000)
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return lockTaken() }
        }
    }

    /// Takes the lock if it is free at once; never waits.
    func tryAcquire() -> Bool {
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else { return false }
        lockTaken()
        return true
    }

    private func lockTaken() {
        if ranOut.load(ordering: .relaxed) { ranOut.store(false, ordering: .relaxed) }
    }

    func release() { flock(descriptor, LOCK_UN) }
}

extension String {
    fileprivate var leftPaddedHex: String { count == 1 ? "0" + self : self }
}
