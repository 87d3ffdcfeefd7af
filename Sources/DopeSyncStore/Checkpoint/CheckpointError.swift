import DopeSyncBundle
import DopeSyncSupport
import SQLiteSupport

#if canImport(Glibc)
    import Glibc
#endif

/// An error from the checkpoint store: a stable ``code``, a human ``message``, and the SQLite error behind it.
///
/// The code is what callers switch on (and what goes into logs and metrics); new codes can be added
/// without breaking anyone because ``Code`` is a struct over a private enum.
public struct CheckpointError: Error, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Sendable {
            case cannotOpen = "cannot_open"
            case busy
            case diskFull = "disk_full"
            case corrupt
            case readOnly = "read_only"
            case ioError = "io_error"
            case schemaTooNew = "schema_too_new"
            case noIntent = "no_intent"
            case conflictingResult = "conflicting_result"
            case database
            case notOwned = "not_owned"
            case unreachable
            case leaseLost = "lease_lost"
            case refused
            case cancelled
        }
        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// The database file or its lock file could not be opened or created.
        public static let cannotOpen = Code(.cannotOpen)
        /// Another process held the database longer than the busy timeout.
        public static let busy = Code(.busy)
        /// The disk (or quota) is full: nothing was written.
        public static let diskFull = Code(.diskFull)
        /// The file is damaged or is not a SQLite database.
        public static let corrupt = Code(.corrupt)
        /// The database or its folder is read-only for this user.
        public static let readOnly = Code(.readOnly)
        /// The operating system reported an I/O error.
        public static let ioError = Code(.ioError)
        /// The database was migrated by a newer dopesync that knows migrations this one does not.
        public static let schemaTooNew = Code(.schemaTooNew)
        /// ``CheckpointStore/recordResult(sessionID:stepKey:serverID:now:)`` for a step with no recorded intent.
        public static let noIntent = Code(.noIntent)
        /// A step already done with one server id was reported done with another: the record may exist twice.
        public static let conflictingResult = Code(.conflictingResult)
        /// A file of the database is not the worker's own (another user's, a symlink): refused.
        public static let notOwned = Code(.notOwned)
        /// The shared database (PostgreSQL) did not answer: down, restarting, or cut off by the network.
        public static let unreachable = Code(.unreachable)
        /// This worker's claim on the bundle is no longer its own (its lease ran out and another
        /// worker may hold it): the write was refused and changed nothing.
        public static let leaseLost = Code(.leaseLost)
        /// The shared database refused this user, its password or the database named: a setting to fix.
        public static let refused = Code(.refused)
        /// Any other SQLite failure (a bug, or a schema changed behind our back).
        public static let database = Code(.database)
        /// The task waiting for the statement was cancelled (the run is ending): nothing is known
        /// of the database from it, so it is neither an outage nor a failure of the database.
        public static let cancelled = Code(.cancelled)

        /// A short stable string (`disk_full`, `busy`, ...).
        public var description: String { value.rawValue }
    }

    public let code: Code
    public let message: String

    /// Whether the database itself failed: held by another process past the busy timeout, a full
    /// disk, an I/O error, damage, read-only, or it cannot be opened. Then no bundle can be
    /// checkpointed, and a run stops claiming instead of giving every bundle back one by one.
    /// False for a problem with one record (``Code/noIntent``, ``Code/conflictingResult``, and the
    /// unnamed ``Code/database``), which concerns one bundle.
    public var isDatabaseFailure: Bool {
        [Code.busy, .diskFull, .ioError, .readOnly, .corrupt, .cannotOpen, .notOwned].contains(code)
    }
    /// Whether the shared database could not be reached: the run stops claiming, settles what it
    /// holds, and ends with 75 (tried again by the next run), as when the API cannot be reached.
    public var isUnreachable: Bool { code == .unreachable }
    /// The underlying SQLite error, if any.
    public let cause: SQLiteError?

    public init(code: Code, message: String, cause: SQLiteError? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
    }

    public var description: String {
        var text = "checkpoint store: \(message) [\(code)]"
        if let cause { text += " (\(cause))" }
        return text
    }

    /// A step already done under one server id, reported done under another: both stores say so alike.
    package static func conflictingResult(
        sessionID: String, stepKey: String, doneAs: Int64, reportedAs: Int64, how: String
    ) -> CheckpointError {
        CheckpointError(
            code: .conflictingResult,
            message:
                "step \(stepKey) of session \(sessionID) was done with server id \(doneAs), \(how) \(reportedAs): the record may exist twice on the server"
        )
    }

    /// A step's result with no intent recorded before it (a bug in the caller).
    static func noIntent(sessionID: String, stepKey: String) -> CheckpointError {
        CheckpointError(code: .noIntent, message: "step \(stepKey) of session \(sessionID) has no recorded intent")
    }

    /// The exit status of a run or command that cannot use the shared database at all: 78 when
    /// it refuses the user or password, 73 when a newer dopesync migrated it, else 75 (an
    /// outage: the next run may find it back).
    public var exitStatusWhenUnusable: ExitStatus {
        switch code {
        case .refused: .configuration
        case .schemaTooNew: .cannotCreate
        default: .temporaryFailure
        }
    }

    /// This worker's lease on `name` ran out (another may have taken the bundle over): nothing written.
    package static func leaseLost(_ name: String) -> CheckpointError {
        CheckpointError(
            code: .leaseLost,
            message: "the claim of \(name) is no longer this worker's (its lease ran out); nothing was written")
    }

    /// Maps a SQLite failure to a code on purpose, so that a full disk or a damaged file reads
    /// as such to an operator instead of as "SQLite error 13".
    static func from(_ error: SQLiteError, path: String, doing: String) -> CheckpointError {
        // A write the system refused for want of space reads "disk I/O error" where it growing
        // the shared-memory index failed: a full disk all the same.
        if error.systemErrno == ENOSPC && error.code.primary != .full {
            return from(
                SQLiteError(code: .full, message: error.message, sql: error.sql, systemErrno: ENOSPC), path: path,
                doing: doing)
        }
        return switch error.code.primary {
        case .busy, .locked:
            CheckpointError(
                code: .busy, message: "\(path) stayed locked by another process while \(doing)", cause: error)
        case .full:
            CheckpointError(
                code: .diskFull,
                message:
                    "the disk holding \(path) is full; free space and run again (nothing was lost: the last change was not written)",
                cause: error)
        case .corrupt, .notADatabase:
            CheckpointError(
                code: .corrupt,
                message:
                    "\(path) is damaged or not a dopesync database; move it aside to start with an empty one (idempotency keys keep the server free of duplicates)",
                cause: error)
        case .readOnly:
            CheckpointError(
                code: .readOnly, message: "\(path) (or its folder) is read-only for this user", cause: error)
        case .cantOpen:
            CheckpointError(code: .cannotOpen, message: "cannot open \(path)", cause: error)
        case .ioError:
            CheckpointError(code: .ioError, message: "I/O error on \(path) while \(doing)", cause: error)
        default:
            CheckpointError(code: .database, message: "SQLite failed while \(doing) on \(path)", cause: error)
        }
    }
}
