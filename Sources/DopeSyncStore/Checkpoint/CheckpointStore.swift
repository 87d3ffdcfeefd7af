import DopeSyncBundle
import DopeSyncSupport
import Foundation
import SQLiteSupport

/// The checkpoint database: which upload steps are done (with their server ids), the retry
/// bookkeeping of each bundle, claims in progress, and the runs.
///
/// Promises:
/// - Every method that changes something is one `BEGIN IMMEDIATE` transaction: it all commits or none of it.
/// - Several processes may use one database at once. Write transactions are serialised across processes
///   by `flock(2)` on a lock file beside the database, which closes the window of SQLite 3.40's WAL-reset
///   bug (two processes writing or checkpointing at the same instant can corrupt the WAL index; fixed in
///   3.44). Readers are not blocked (WAL).
/// - `synchronous = NORMAL`: a commit is durable once the WAL is synced at checkpoint, so a power loss can
///   lose the last few commits but never corrupts the file. Losing a step's result is harmless: the step is
///   sent again with the same deterministic `Idempotency-Key` and byte-identical body, and a server that
///   honours keys replays its first answer. FULL, which syncs at every commit, is far slower
///   (BENCHMARKS.md, "synchronous NORMAL against FULL").
/// - Methods block the calling thread for the length of one short transaction (or the busy timeout);
///   a run calls them through its ``CheckpointWriter``, on a thread of their own.
///
/// One file per table: `CheckpointStore+Steps.swift`, `+Bundles.swift` (with the claims, which a
/// bundle's claim and outcome write together), `+Runs.swift`. Rows are read by column name
/// (``SQLiteRow``), so a schema change shows up as an error, not as a silent zero.
public final class CheckpointStore: Sendable {
    /// The database file.
    public let path: String
    /// The file locked around every write transaction.
    public let lockPath: String
    private let database: SQLiteDatabase
    /// The private copy a snapshot reads (``init(readingSnapshotOf:)``), removed with the store.
    private let temporaryFolder: String?
    /// A run's shared ``StoreLock``, held for as long as the store is: no `migrate` copies the
    /// file while the run may still write it.
    private let storeLock: StoreLock?
    /// Whether another process held the ``StoreLock`` when the run took it (true without one):
    /// a run of an older build may share the spool (``SpoolClaims``).
    public var othersHeldTheStoreLock: Bool { storeLock?.othersHeldItWhenTaken ?? true }
    /// What a first sight and a deferral ask of the clock: the system's, or a test's.
    let clock: ClockFacts

    /// Opens (creating if needed) the database at `path` and applies missing migrations.
    ///
    /// - Parameters:
    ///   - lockPath: the write-lock file; `path + ".lock"` when nil.
    ///   - busyTimeoutMilliseconds: how long a statement waits for another process before ``CheckpointError/Code/busy``.
    ///   - lock: a run's shared ``StoreLock``, kept until the store goes.
    ///   - clock: whether the clock is synchronized, and now on the boot's clock (``ClockFacts``).
    public init(
        path: String, lockPath: String? = nil, holding lock: StoreLock? = nil, busyTimeoutMilliseconds: Int32 = 10_000,
        now: Date = Date(), clock: ClockFacts = .system
    ) throws(CheckpointError) {
        self.clock = clock
        // The folder may be reached through a symlink (a spool on another disk); the files in it
        // may not be one (DatabaseOwnership, SQLITE_OPEN_NOFOLLOW, which refuses any link in the path).
        temporaryFolder = nil
        storeLock = lock
        self.path = DatabaseOwnership.resolvingFolder(of: path)
        self.lockPath = DatabaseOwnership.resolvingFolder(of: lockPath ?? path + ".lock")
        let path = self.path
        var options = SQLiteOptions()
        options.walJournal = true
        options.synchronous = .normal
        options.busyTimeoutMilliseconds = busyTimeoutMilliseconds
        options.writeLockPath = self.lockPath
        // A run commits once per upload step with the same few statements: parsing them every
        // time cost more than running them.
        options.reusesPreparedStatements = true
        // A step's checkpoint changes a row or two of about 250 bytes, and each commit appends
        // every page it changed to the WAL, in full: with 1 KiB pages a commit is a quarter to a
        // half of its bytes with 4 KiB ones (more pages split). A latency-bound run gained a
        // little (BENCHMARKS.md, "1 KiB pages for the checkpoint database"). The WAL is checkpointed, and
        // synced, every 4 MiB, as with SQLite's default of 1000 pages of 4 KiB: what a power loss
        // can take back (see `synchronous` above) stays as it was.
        options.pageSizeOfNewDatabase = 1024
        options.walAutocheckpointBytes = 4 << 20
        try DatabaseOwnership.secure(path: path, lockPath: self.lockPath)
        do {
            database = try SQLiteDatabase(path: path, options: options)
        } catch {
            if error.code.primary == .cantOpen {
                throw CheckpointError(
                    code: .cannotOpen,
                    message: "cannot open the checkpoint database \(path) (does its folder exist and is it writable?)",
                    cause: error)
            }
            throw CheckpointError.from(error, path: path, doing: "opening")
        }
        try Self.perform(path: path, doing: "migrating") {
            try CheckpointMigrator.migrate(database, migrations: checkpointMigrations, now: now.timeIntervalSince1970)
        }
    }

    /// Opens a copy of the database at `path` (the file and its WAL, as this user can read them,
    /// in a private temporary folder) to read what it holds, writing, creating and locking nothing
    /// beside it: for `status` as a user who does not own it, or on a read-only file system. The
    /// WAL's commits are included (a torn last frame is left out by SQLite's own checksums).
    /// Without a readable WAL, the main file as it is on disk (``SQLiteOptions/immutable``). The
    /// file itself is neither migrated nor checked for its owner, since nothing acts on what it says.
    /// Throws ``CheckpointError/Code/busy`` when a run checkpointed the file under every copy.
    public init(readingSnapshotOf path: String) throws(CheckpointError) {
        self.path = path
        self.lockPath = path + ".lock"
        let copy = try Self.privateCopy(of: path)
        temporaryFolder = copy.map { ($0 as NSString).deletingLastPathComponent }
        storeLock = nil
        clock = .system
        do {
            if let copy {
                database = try SQLiteDatabase(path: copy, options: SQLiteOptions())
                // The copy is ours: brought up to this version's schema, so that an older
                // dopesync's file reads as this one's queries expect. (A newer one's is read as is.)
                try? CheckpointMigrator.migrate(
                    database, migrations: checkpointMigrations, now: Date().timeIntervalSince1970)
            } else {
                var options = SQLiteOptions()
                options.immutable = true
                database = try SQLiteDatabase(path: path, options: options, readOnly: true)
            }
        } catch {
            if let folder = copy.map({ ($0 as NSString).deletingLastPathComponent }) {
                try? FileManager.default.removeItem(atPath: folder)
            }
            throw CheckpointError.from(error, path: path, doing: "opening (read only)")
        }
    }

    /// The database and its WAL copied into a new private folder; nil when either cannot be read
    /// or copied (then the main file is read in place). Throws when the file changed under every
    /// try (``copyTries``).
    ///
    /// Why the file is copied twice: a run checkpoints its WAL back into the file as it goes, and
    /// restarts the WAL once all of it is in. The file copied before a checkpoint, with the WAL
    /// copied after it, read as a damaged database ("malformed", pages referenced twice), as a
    /// table not there yet, or as rows twice (`SnapshotWhileWritingTests` tore about one copy in
    /// three that way while a writer checkpointed every few commits). So the file is copied again
    /// once the WAL is: when both copies of it are the same, no checkpoint wrote it in between,
    /// and the WAL's frames (a torn last one is left out by SQLite's checksums) apply to it whole.
    private static func privateCopy(of path: String) throws(CheckpointError) -> String? {
        let wal = path + "-wal"
        guard FileManager.default.isReadableFile(atPath: path),
            !FileManager.default.fileExists(atPath: wal) || FileManager.default.isReadableFile(atPath: wal)
        else { return nil }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "dopesync-status-\(UUID().uuidString)")
        let copy = folder.appendingPathComponent("dopesync.sqlite").path
        let again = copy + ".again"
        do {
            try FileManager.default.createDirectory(
                at: folder, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            for _ in 0..<copyTries {
                for file in [copy, copy + "-wal", again] where FileManager.default.fileExists(atPath: file) {
                    try FileManager.default.removeItem(atPath: file)
                }
                try FileManager.default.copyItem(atPath: path, toPath: copy)
                if FileManager.default.fileExists(atPath: wal) {
                    try FileManager.default.copyItem(atPath: wal, toPath: copy + "-wal")
                }
                try FileManager.default.copyItem(atPath: path, toPath: again)
                if FileManager.default.contentsEqual(atPath: copy, andPath: again) {
                    try FileManager.default.removeItem(atPath: again)
                    return copy
                }
            }
        } catch {
            try? FileManager.default.removeItem(at: folder)
            return nil
        }
        try? FileManager.default.removeItem(at: folder)
        throw CheckpointError(
            code: .busy,
            message: "\(path) was being checkpointed by a run under each of \(copyTries) copies, which would read "
                + "as a damaged file: nothing is wrong with it; try again in a moment")
    }

    /// How many times ``privateCopy(of:)`` copies a file that a checkpoint keeps changing.
    static let copyTries = 10

    deinit {
        if let temporaryFolder { try? FileManager.default.removeItem(atPath: temporaryFolder) }
    }

    /// Opens the spool's database (`SPOOL/dopesync.sqlite`, lock `SPOOL/dopesync.sqlite.lock`).
    /// A run passes its shared ``StoreLock``, kept until the store goes.
    public convenience init(
        spool: Spool, holding lock: StoreLock? = nil, busyTimeoutMilliseconds: Int32 = 10_000, now: Date = Date()
    ) throws(CheckpointError) {
        try self.init(
            path: spool.databasePath, lockPath: spool.databaseLockPath, holding: lock,
            busyTimeoutMilliseconds: busyTimeoutMilliseconds, now: now)
    }

    /// Closes the database now, on this thread (a close may checkpoint the WAL under the write
    /// lock), then lets a run's ``StoreLock`` go; later calls fail. A store closes itself when
    /// released otherwise.
    public func close() {
        database.close()
        storeLock?.release()
    }

    /// The names of the migrations applied to this database, in the order they were applied.
    public func appliedMigrations() throws(CheckpointError) -> [String] {
        try Self.perform(path: path, doing: "reading migrations") { try SQLiteMigrator.appliedNames(database) }
    }

    // `doing` is only needed for an error message: an autoclosure, so a step's commit builds no string.
    func read<T>(_ doing: @autoclosure () -> String, _ body: (SQLiteConnection) throws -> T)
        throws(CheckpointError) -> T
    {
        try Self.perform(path: path, doing: doing()) { try database.read(body) }
    }

    @discardableResult
    func write<T>(_ doing: @autoclosure () -> String, _ body: (SQLiteConnection) throws -> T)
        throws(CheckpointError) -> T
    {
        try Self.perform(path: path, doing: doing()) { try database.write(body) }
    }

    /// Runs `body` and gives every failure a ``CheckpointError`` code.
    static func perform<T>(path: String, doing: @autoclosure () -> String, _ body: () throws -> T)
        throws(CheckpointError) -> T
    {
        do {
            return try body()
        } catch let error as CheckpointError {
            throw error
        } catch let error as SQLiteError {
            throw CheckpointError.from(error, path: path, doing: doing())
        } catch {
            throw CheckpointError(code: .database, message: "\(doing()) on \(path): \(error)")
        }
    }
}

// MARK: - Rows

extension StepRecord.State {
    /// The `state` column; anything else is a database this version does not understand.
    init(_ column: String) throws(SQLiteError) {
        guard let state = StepRecord.State(rawValue: column) else {
            throw SQLiteError(code: .mismatch, message: "steps.state is \"\(column)\", neither sent nor done")
        }
        self = state
    }
}

extension CompletedStep {
    /// A done step's `server_id`, `content_digest` and `done_at` (NOT NULL once done, by the table's CHECK).
    init(_ row: SQLiteRow) throws(SQLiteError) {
        self.init(
            serverID: try row["server_id"], contentDigest: try row["content_digest"],
            doneAt: Date(timeIntervalSince1970: try row["done_at"]))
    }
}
