import Foundation

/// The document `dopesync status --json` prints. Field names are stable; times are ISO 8601 UTC,
/// ages and durations in seconds.
public struct SpoolStatus: Sendable, Codable, Equatable {
    public typealias Folder = SpoolFolderStatus
    public struct Incoming: Sendable, Codable, Equatable {
        public var dueNow: Int
        /// Deferred bundles whose next attempt (in the checkpoint database) is still to come.
        public var waitingForRetry: Int
        /// Modified less than `min-age` ago: a run leaves them for now.
        public var heldByMinAge: Int
        /// The `min-age` those are held by.
        public var minAgeSeconds: Double
        /// Bundles whose mtime is in the future (their producer's clock is ahead), by how many
        /// seconds: judged by when they arrived instead.
        public var mtimeInFuture: [MtimeInFuture] = []
        /// Deferred bundles whose deferral was recorded ahead of this clock, by how many seconds:
        /// the clock went back since, and they are due now.
        public var deferredInFuture: [MtimeInFuture] = []
    }

    public struct MtimeInFuture: Sendable, Codable, Equatable {
        public var name: String
        public var secondsAhead: Double
    }
    public struct LastError: Sendable, Codable, Equatable {
        public var reason: String
        public var step: String?
        public var httpStatus: Int?
        public var message: String?
    }
    public struct Waiting: Sendable, Codable, Equatable {
        public var name: String
        /// Its session's id, as the checkpoint store knows it.
        public var session: String? = nil
        /// Attempts counted (nil when the database does not know the bundle).
        public var attempts: Int?
        public var nextAttemptAt: Date
        public var lastError: LastError?
        /// The API its session's checkpoints were recorded against, when not the configured one.
        public var checkpointsAPI: String? = nil
    }
    public struct Failed: Sendable, Codable, Equatable {
        public var name: String
        public var session: String?
        public var failedAt: Date?
        /// From `failed/NAME.error`; from the database when the sidecar is missing or unreadable.
        public var reason: String?
        public var step: String?
        public var httpStatus: Int?
        /// The bundle's field at fault, when one is (`dope[2].ammunitionId`).
        public var field: String?
        public var message: String?
        public var attempts: Int?
        public var hasSidecar: Bool
        /// The API its session's checkpoints were recorded against, when not the configured one.
        public var checkpointsAPI: String? = nil
    }
    public struct Claim: Sendable, Codable, Equatable {
        public var name: String
        public var host: String?
        public var pid: Int32?
        public var runID: String?
        public var claimedAt: Date?
        public var ageSeconds: Double
        /// False: its claimer died (the lock is free, or its lease ran out); the next run takes it
        /// back and resumes it.
        public var ownerAlive: Bool
        /// With a shared database: seconds until the lease runs out unless renewed (below zero:
        /// run out that long ago). Nil on one host.
        public var leaseRemainingSeconds: Double? = nil
        /// Why no run can take it back: this user may not open it (`owner NAME, mode 0600`), so
        /// no lock can show whether its claimer lives. Nil for every other claim.
        public var unreadable: String? = nil
        /// Why no run can take it back on NFS: its claimer died, and this user may read it but not
        /// write it (`owner NAME, mode 0644`), which an exclusive lock there needs. Nil otherwise.
        public var notLockable: String? = nil
    }
    /// The last run that finished. Its JSON is flat: who ran it, then the fields of its summary.
    public struct LastRun: Sendable, Codable, Equatable {
        public var runID: String
        public var host: String
        public var pid: Int32
        public var startedAt: Date
        public var finishedAt: Date
        /// Whether the API answered the session lookups; nil when no bundle needed one.
        public var apiLookups: Bool?
        public var summary: RunSummary

        init?(_ run: RunRecord) {
            guard let finishedAt = run.finishedAt, let summary = run.summary else { return nil }
            (runID, host, pid, startedAt, self.finishedAt) = (run.runID, run.host, run.pid, run.startedAt, finishedAt)
            (apiLookups, self.summary) = (run.apiLookups, summary)
        }

        private enum CodingKeys: String, CodingKey { case runID, host, pid, startedAt, finishedAt, apiLookups }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            runID = try container.decode(String.self, forKey: .runID)
            host = try container.decode(String.self, forKey: .host)
            pid = try container.decode(Int32.self, forKey: .pid)
            startedAt = try container.decode(Date.self, forKey: .startedAt)
            finishedAt = try container.decode(Date.self, forKey: .finishedAt)
            apiLookups = try container.decodeIfPresent(Bool.self, forKey: .apiLookups)
            summary = try RunSummary(from: decoder)
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(runID, forKey: .runID)
            try container.encode(host, forKey: .host)
            try container.encode(pid, forKey: .pid)
            try container.encode(startedAt, forKey: .startedAt)
            try container.encode(finishedAt, forKey: .finishedAt)
            try container.encodeIfPresent(apiLookups, forKey: .apiLookups)
            try summary.encode(to: encoder)
        }
    }

    public var spool: String
    public var database: String
    public var databaseExists: Bool
    public var generatedAt: Date
    public var folders: [String: Folder]
    public var incoming: Incoming
    public var waiting: [Waiting]
    public var failed: [Failed]
    public var claims: [Claim]
    public var lastRun: LastRun?
    /// Read as it is on disk, without the commits of a run in progress (another user, or a
    /// read-only file system; see ``gather(spool:minAge:now:)``).
    public var databaseReadAsSnapshot: Bool = false
    /// Why the database could not be read by this user, if it could not: retry times, reasons
    /// kept only there and claims' owners are then unknown.
    public var databaseUnreadable: String? = nil
    /// The spool's file system: free bytes against `min-free-space`.
    public var space: Space? = nil

    public struct Space: Sendable, Codable, Equatable {
        public var freeBytes: Int64
        public var totalBytes: Int64
        public var floorBytes: Int64
        /// Below twice the floor: a run is not stopped yet, but soon will be.
        public var low: Bool { freeBytes < 2 * floorBytes }

        init(_ space: FileSystemSpace, floor: FreeSpaceFloor) {
            freeBytes = space.free
            totalBytes = space.total
            floorBytes = floor.bytes(ofTotal: space.total)
        }
    }

    /// Bundles whose session is on the server with only some of its records, oldest first: what
    /// the API's and the app's owners see as an incomplete session until the bundle is done.
    public var halfSessions: [HalfSessionEntry] = []

    public struct HalfSessionEntry: Sendable, Codable, Equatable {
        public var name: String
        /// Where the bundle is: `incoming` (waiting for its next attempt), `processing` or `failed`.
        public var folder: String
        public var session: String
        public var recordsOnServer: Int
        /// Nil when the bundle's plan size was never recorded.
        public var recordsLeft: Int?
        /// When its first record was created on the server.
        public var since: Date
        public var ageSeconds: Double
    }

    /// The runs started last, newest first (`--runs N`); nil when not asked for. A run still
    /// going, or one that died, has no `finishedAt` and no summary.
    public var recentRuns: [RunRecord]? = nil
    /// With a shared database: the last finished run of each host, newest first.
    public var lastRunOfEachHost: [LastRun]? = nil

    /// One JSON document, keys sorted, times ISO 8601.
    public func json() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        // Force-try: strings, numbers, dates and arrays of them only.
        return String(decoding: try! encoder.encode(self), as: UTF8.self)
    }

    /// Whether this user owns the database and may write its folder: then opening it normally
    /// changes nothing anyone else would see.
    static func mayOpenForWriting(_ spool: Spool) -> Bool {
        var info = stat()
        guard lstat(spool.databasePath, &info) == 0, info.st_uid == geteuid() else { return false }
        return access(spool.root, W_OK) == 0
    }
}

extension SpoolStatus.LastError {
    init(_ failure: BundleFailure) {
        self.init(
            reason: failure.reason.rawValue, step: failure.step, httpStatus: failure.httpStatus,
            message: failure.message)
    }
}
