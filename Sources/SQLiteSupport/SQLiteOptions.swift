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
