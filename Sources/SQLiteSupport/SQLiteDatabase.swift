import CSQLite
import Synchronization
import ThreadRules

/// One SQLite database file, used from any task; a connection is lent to one closure at a time.
public final class SQLiteDatabase: Sendable {
    public let path: String
    // Safety: the handle and its statements are only used inside `lock`, so no two threads use them at once.
    private nonisolated(unsafe) let handle: OpaquePointer
    private nonisolated(unsafe) let statements: PreparedStatements?
    /// Whether ``close()`` has run; held while the connection is lent.
    private let lock = Mutex<Bool>(false)
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
    @available(*, noasync, message: "blocks on the database file: call it on the writer's thread, or one of its own")
    public init(path: String, options: SQLiteOptions = SQLiteOptions(), readOnly: Bool = false) throws(SQLiteError) {
        self.path = path
        _ = Self.configureLibraryOnce
        let handle = try Self.openHandle(path: path, options: options, readOnly: readOnly)
        // Set up the connection before `self` is complete, so a failure here closes it exactly once.
        let writeLock: WriteLock?
        do {
            writeLock = try options.writeLockPath.map { lockPath throws(SQLiteError) in
                try WriteLock(path: lockPath, timeoutMilliseconds: max(options.busyTimeoutMilliseconds, 0))
            }
            let connection = SQLiteConnection(handle: handle, statements: nil)
            try Self.configure(connection, options: options, readOnly: readOnly, writeLock: writeLock)
        } catch {
            sqlite3_close_v2(handle)
            throw error
        }
        self.handle = handle
        self.writeLock = writeLock
        self.busyTimeoutMilliseconds = options.busyTimeoutMilliseconds
        self.statements = options.reusesPreparedStatements ? PreparedStatements() : nil
    }

    /// The connection's handle, with extended result codes and the busy timeout set.
    private static func openHandle(path: String, options: SQLiteOptions, readOnly: Bool) throws(SQLiteError)
        -> OpaquePointer
    {
        BlockingCalls.check("SQLite: opening \(path)")
        var handle: OpaquePointer?
        let flags =
            (readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) | SQLITE_OPEN_NOMUTEX
            // A database reached through a symlink is refused (SQLite 3.31+): whoever made the link
            // would choose what the store says.
            | SQLITE_OPEN_NOFOLLOW
        let snapshot = readOnly && options.immutable
        let name = snapshot ? immutableURI(path) : path
        let code = sqlite3_open_v2(name, &handle, flags | (snapshot ? SQLITE_OPEN_URI : 0), nil)
        guard code == SQLITE_OK, let handle else {
            let message = handle.map { SQLiteConnection.errorMessage($0) } ?? String(cString: sqlite3_errstr(code))
            sqlite3_close_v2(handle)
            throw SQLiteError(code: SQLiteResultCode(rawValue: code), message: "cannot open \(path): \(message)")
        }
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, options.busyTimeoutMilliseconds)
        return handle
    }

    /// The connection's PRAGMAs: foreign keys always; for a writer, `synchronous`, the page size
    /// of a new file, WAL and its autocheckpoint.
    private static func configure(
        _ connection: SQLiteConnection, options: SQLiteOptions, readOnly: Bool, writeLock: WriteLock?
    ) throws(SQLiteError) {
        try connection.execute("PRAGMA foreign_keys = ON")
        guard !readOnly else { return }
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

    /// Process-wide settings, before SQLite initialises itself at the first open (later, SQLite
    /// refuses them and keeps its defaults, which is harmless).
    private static let configureLibraryOnce: Void = {
        // The worker's checkpoints allocate on every statement; the statistics are never read.
        _ = dopesync_sqlite3_memory_statistics_off()
    }()

    deinit {
        close()
    }

    /// Closes the connection now, on this thread (a close may checkpoint the WAL, so an owner that
    /// must not block closes it where it may). Later uses throw; a second close does nothing.
    @available(*, noasync, message: "blocks on the database file: call it on the writer's thread, or one of its own")
    public func close() {
        lock.withLock { closed in
            guard !closed else { return }
            closed = true
            closeHandle()
        }
    }

    private func closeHandle() {
        BlockingCalls.check("SQLite: closing \(path)")
        statements?.finalizeAll()
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
    @available(*, noasync, message: "blocks on the database file: call it on the writer's thread, or one of its own")
    public func read<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        try withConnection(body)
    }

    /// Runs `body` in one `BEGIN IMMEDIATE` transaction: all of it commits, or none of it.
    ///
    /// IMMEDIATE takes the write lock up front, so a transaction never fails half-way with
    /// SQLITE_BUSY on its first write; it waits (busy timeout) instead.
    @available(*, noasync, message: "blocks on the database file: call it on the writer's thread, or one of its own")
    public func write<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        try withConnection { connection in
            try writeLock?.acquire()
            defer { writeLock?.release() }
            // Prepared statements rather than `execute`: they are reused when the database keeps them.
            try connection.query("BEGIN IMMEDIATE")
            return try Self.commitOrRollBack(connection, body)
        }
    }

    /// Runs `body` in the transaction the caller has begun, and commits it. If `body` or the COMMIT
    /// throws, rolls back only if the transaction is still open (see
    /// ``SQLiteConnection/rollBackIfOpen()``): nothing of it is then committed.
    private static func commitOrRollBack<T>(
        _ connection: SQLiteConnection, _ body: (SQLiteConnection) throws -> T
    ) throws -> T {
        do {
            let result = try body(connection)
            try connection.query("COMMIT")
            return result
        } catch {
            connection.rollBackIfOpen()
            throw error
        }
    }

    private func withConnection<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        // The result stays on this task; only the lock is shared.
        var outcome: Result<T, any Error>?
        lock.withLock { closed in
            outcome =
                closed
                ? .failure(closedError) : Result { try body(SQLiteConnection(handle: handle, statements: statements)) }
        }
        return try outcome!.get()
    }

    private var closedError: SQLiteError { SQLiteError(code: .misuse, message: "\(path) was closed") }
}

extension String {
    fileprivate var leftPaddedHex: String { count == 1 ? "0" + self : self }
}
