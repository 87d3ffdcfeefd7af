import Foundation

/// `dopesync status [--spool DIR] [--json]`: what is in the spool and why, without SQL.
///
/// Cost: one `readdir` + `fstatat` pass per folder, two queries on the checkpoint database (deferred and
/// failed bundles), one for claims and one for the last run, and one small read per `failed/*.error`.
/// No archive is opened and nothing is written (a missing database is not created).
public enum StatusCommand {
    public static func run(
        spoolRoot: String, json: Bool, minAge: Duration = .seconds(5), minFreeSpace: FreeSpaceFloor = .default,
        runs: Int = 0, now: Date = Date()
    ) -> CommandOutcome {
        do {
            // Absolute, so the database's path can be copied into `sqlite3` from anywhere.
            let root = URL(fileURLWithPath: spoolRoot).standardizedFileURL.path
            var report = try SpoolStatus.gather(spool: Spool(root: root), minAge: minAge, runs: runs, now: now)
            report.space = FileSystemSpace(of: root).map { SpoolStatus.Space($0, floor: minFreeSpace) }
            return CommandOutcome(output: json ? report.json() : report.text(), status: .success)
        } catch let error as SpoolError {
            return CommandOutcome(output: "", diagnostics: "cannot read the spool: \(error)", status: .cannotCreate)
        } catch {
            return CommandOutcome(
                output: "", diagnostics: "cannot read the checkpoint database: \(error)", status: .cannotCreate)
        }
    }
}

/// The document `dopesync status --json` prints. Field names are stable; times are ISO 8601 UTC,
/// ages and durations in seconds.
public struct SpoolStatus: Sendable, Codable, Equatable {
    public struct Folder: Sendable, Codable, Equatable {
        public var count: Int
        public var bytes: Int64
        /// Seconds since the oldest file's mtime; in `incoming/`, since the checkpoint database first
        /// saw it, which a file's mtime (its producer's clock) need not say. Nil when empty.
        public var oldestAgeSeconds: Double?
    }
    public struct Incoming: Sendable, Codable, Equatable {
        public var dueNow: Int
        /// Deferred bundles whose next attempt (in the checkpoint database) is still to come.
        public var waitingForRetry: Int
        /// Modified less than `min-age` ago: a run leaves them for now.
        public var heldByMinAge: Int
        /// The `min-age` those are held by.
        public var minAgeSeconds: Double
    }
    public struct LastError: Sendable, Codable, Equatable {
        public var reason: String
        public var step: String?
        public var httpStatus: Int?
        public var message: String?
    }
    public struct Waiting: Sendable, Codable, Equatable {
        public var name: String
        /// Attempts counted (nil when the database does not know the bundle).
        public var attempts: Int?
        public var nextAttemptAt: Date
        public var lastError: LastError?
    }
    public struct Failed: Sendable, Codable, Equatable {
        public var name: String
        public var session: String?
        public var failedAt: Date?
        /// From `failed/NAME.error`; from the database when the sidecar is missing or unreadable.
        public var reason: String?
        public var step: String?
        public var httpStatus: Int?
        public var message: String?
        public var attempts: Int?
        public var hasSidecar: Bool
    }
    public struct Claim: Sendable, Codable, Equatable {
        public var name: String
        public var host: String?
        public var pid: Int32?
        public var runID: String?
        public var claimedAt: Date?
        public var ageSeconds: Double
        /// False: its claimer died (the lock is free); the next run takes it back and resumes it.
        public var ownerAlive: Bool
    }
    public struct LastRun: Sendable, Codable, Equatable {
        public var runID: String
        public var host: String
        public var pid: Int32
        public var startedAt: Date
        public var finishedAt: Date
        public var claimed: Int
        public var done: Int
        public var deferred: Int
        public var failed: Int
        public var requests: Int
        public var bytes: Int64
        public var seconds: Double
        public var exitCode: Int32
        /// Whether the API answered the session lookups; nil when no bundle needed one.
        public var apiLookups: Bool?
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

    /// The runs started last, newest first (`--runs N`); nil when not asked for. A run still
    /// going, or one that died, has no `finishedAt` and no summary.
    public var recentRuns: [RunRecord]? = nil

    /// Reads the spool and its checkpoint database. Throws ``SpoolError`` when a folder cannot be listed.
    public static func gather(spool: Spool, minAge: Duration = .seconds(5), runs: Int = 0, now: Date = Date()) throws
        -> SpoolStatus
    {
        let databaseExists = FileManager.default.fileExists(atPath: spool.databasePath)
        // Only reads: as the worker's own user it reads as a run would (the WAL included); as anyone
        // else, or where nothing can be written, it reads the file as it is on disk and leaves
        // nothing behind (a status as root must not make files the worker then cannot use).
        let snapshot = databaseExists && !Self.mayOpenForWriting(spool)
        var unreadable: String? = nil
        var store: CheckpointStore?
        if !databaseExists {
            store = nil
        } else if snapshot {
            do {
                store = try CheckpointStore(readingSnapshotOf: spool.databasePath)
            } catch {
                // Most likely its 0600 mode: the folders still say most of what status shows.
                store = nil
                unreadable = "\(error)"
            }
        } else {
            store = try CheckpointStore(spool: spool, now: now)
        }
        // A copy read as it is may lack what is still in a WAL this user cannot read (a run in
        // progress): what cannot be read is unknown, not a reason to fail.
        var inFlight: [String: BundleState] = [:]
        do {
            inFlight = try store?.bundlesInFlight() ?? [:]
        } catch {
            guard snapshot else { throw error }
            store = nil
            unreadable = "\(error)"
        }
        let backlog = try SpoolBacklog.list(spool, inFlight: inFlight, now: now)
        let listings = backlog.listings
        let folders = backlog.folders
        let failedStates =
            try store.map {
                try Dictionary($0.bundles(withOutcome: .failed).map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
            } ?? [:]
        let claimRecords =
            try store.map { try Dictionary($0.claims().map { ($0.bundleName, $0) }, uniquingKeysWith: { a, _ in a }) }
            ?? [:]

        // The same rules as a run's (``IncomingQueue``): what status calls due, a run takes.
        let queue = IncomingQueue(incoming: listings[.incoming] ?? [], states: inFlight, now: now, minAge: minAge)
        let waiting = queue.waitingForRetry.map { entry, state in
            Waiting(
                name: entry.name, attempts: state.attempts, nextAttemptAt: state.nextAttemptAt ?? now,
                lastError: state.lastError.map { LastError($0) })
        }

        let failed = (listings[.failed] ?? []).sorted { ($0.modified, $0.name) < ($1.modified, $1.name) }.map { entry in
            let state = failedStates[entry.name]
            if let sidecar = ErrorSidecar.read(from: spool.sidecarPath(forFailed: entry.name)) {
                return Failed(
                    name: entry.name, session: sidecar.session, failedAt: sidecar.failedAt,
                    reason: sidecar.reason.rawValue,
                    step: sidecar.step, httpStatus: sidecar.httpStatus, message: sidecar.message,
                    attempts: sidecar.attempts ?? state?.attempts, hasSidecar: true)
            }
            return Failed(
                name: entry.name, session: state?.sessionID, failedAt: state?.updatedAt,
                reason: state?.lastError?.reason.rawValue,
                step: state?.lastError?.step, httpStatus: state?.lastError?.httpStatus,
                message: state?.lastError?.message,
                attempts: state?.attempts, hasSidecar: false)
        }

        let claims = (listings[.processing] ?? []).sorted { ($0.modified, $0.name) < ($1.modified, $1.name) }.compactMap
        { entry -> Claim? in
            guard let alive = spool.isClaimHeld(entry) else { return nil }  // moved on since it was listed
            let record = claimRecords[entry.name]
            let since = record?.claimedAt ?? entry.modified
            return Claim(
                name: entry.name, host: record?.owner.host, pid: record?.owner.pid, runID: record?.owner.runID,
                claimedAt: record?.claimedAt, ageSeconds: max(0, now.timeIntervalSince(since)), ownerAlive: alive)
        }

        let lastRun = try store?.lastFinishedRun().flatMap { run -> LastRun? in
            guard let finishedAt = run.finishedAt, let summary = run.summary else { return nil }
            return LastRun(
                runID: run.runID, host: run.host, pid: run.pid, startedAt: run.startedAt, finishedAt: finishedAt,
                claimed: summary.claimed, done: summary.done, deferred: summary.deferred, failed: summary.failed,
                requests: summary.requests, bytes: summary.bytes, seconds: summary.seconds, exitCode: summary.exitCode,
                apiLookups: run.apiLookups)
        }

        let recentRuns = try runs > 0 ? store?.recentRuns(limit: runs) : nil
        return SpoolStatus(
            spool: spool.root, database: spool.databasePath, databaseExists: databaseExists, generatedAt: now,
            folders: folders,
            incoming: Incoming(
                dueNow: queue.due.count, waitingForRetry: queue.waitingForRetry.count,
                heldByMinAge: queue.heldByMinAge.count, minAgeSeconds: minAge / .seconds(1)),
            waiting: waiting, failed: failed, claims: claims, lastRun: lastRun, databaseReadAsSnapshot: snapshot,
            databaseUnreadable: unreadable, recentRuns: recentRuns)
    }

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

    /// How many bundles of each list the text shows (the JSON has them all).
    public static let textListLimit = 20

    /// The report for a person.
    public func text() -> String {
        var lines = [
            "spool        \(spool)",
            "checkpoints  \(database)\(databaseExists ? "" : " (not created yet)")"
                + (databaseUnreadable != nil
                    ? " (cannot be read by this user: retry times and claims unknown; run status as the worker's user)"
                    : databaseReadAsSnapshot ? " (read as it is on disk: not this user's, or read-only)" : ""),
            "",
        ]
        if let space {
            var line =
                "free space   \(ByteCount(space.freeBytes)) of \(ByteCount(space.totalBytes)), floor \(ByteCount(space.floorBytes))"
            if space.freeBytes < space.floorBytes {
                line += ": BELOW THE FLOOR, runs claim nothing (exit 73); `dopesync prune` frees done/"
            } else if space.low {
                line += ": LOW, under twice the floor; runs stop claiming below it"
            }
            lines += [line, ""]
        }
        lines.append("folder          count        size  oldest")
        for name in ["incoming", "processing", "done", "failed"] {
            guard let folder = folders[name] else { continue }
            var line =
                name.padding(toLength: 12, withPad: " ", startingAt: 0)
                + String(folder.count).leftPadded(9) + ByteCount(folder.bytes).description.leftPadded(12)
                + "  " + (folder.oldestAgeSeconds.map(Self.age) ?? "-")
            if name == "incoming" && folder.count > 0 {
                line += "  (\(incoming.dueNow) due now, \(incoming.waitingForRetry) waiting for retry"
                if incoming.heldByMinAge > 0 {
                    line += ", \(incoming.heldByMinAge) modified within min-age \(Self.age(incoming.minAgeSeconds))"
                }
                line += ")"
            }
            lines.append(line)
        }

        lines += Self.section("waiting for retry (\(waiting.count)):", waiting) { bundle in
            var line =
                "\(bundle.name)  next attempt \(Self.time(bundle.nextAttemptAt)) (in \(Self.age(bundle.nextAttemptAt.timeIntervalSince(generatedAt))))"
            if let attempts = bundle.attempts { line += ", \(attempts) attempt\(attempts == 1 ? "" : "s")" }
            if let error = bundle.lastError { line += ", last error: \(Self.describe(error))" }
            return line
        }
        lines += Self.section(
            "failed (\(failed.count)), see failed/NAME.error; `dopesync requeue NAME` once fixed:", failed
        ) { bundle in
            var line = "\(bundle.name)  "
            if let reason = bundle.reason {
                line += Self.describe(
                    LastError(reason: reason, step: bundle.step, httpStatus: bundle.httpStatus, message: bundle.message)
                )
            } else {
                line += "no reason known (no sidecar, no checkpoint row)"
            }
            if let failedAt = bundle.failedAt { line += ", failed \(Self.time(failedAt))" }
            return line
        }
        lines += Self.section("claims in progress (\(claims.count)):", claims) { claim in
            var line = "\(claim.name)  "
            if let host = claim.host, let pid = claim.pid, let runID = claim.runID {
                line += "by \(host) pid \(pid) run \(runID), "
            } else {
                line += "owner unknown, "
            }
            line += "\(Self.age(claim.ageSeconds)) ago, "
            line += claim.ownerAlive ? "owner alive" : "owner dead: an orphan, the next run takes it back"
            return line
        }
        lines.append("")
        if let run = lastRun {
            lines.append(
                "last run     \(run.runID) on \(run.host), finished \(Self.time(run.finishedAt)) (\(Self.age(generatedAt.timeIntervalSince(run.finishedAt))) ago), exit \(run.exitCode)"
            )
            lines.append(
                "             claimed \(run.claimed), done \(run.done), deferred \(run.deferred), failed \(run.failed); \(run.requests) requests, \(ByteCount(run.bytes)), \(String(format: "%.1f", run.seconds)) s"
            )
            switch run.apiLookups {
            case true?:
                lines.append(
                    "exactly once the API answers lookups: nothing is sent twice, even if it ignores Idempotency-Key")
            case false?:
                lines.append(
                    "exactly once the API has no lookups: nothing is sent twice only if it honours Idempotency-Key")
            case nil: lines.append("exactly once not known: no bundle needed a lookup in the last run")
            }
        } else {
            lines.append("last run     none recorded")
        }
        if let recentRuns {
            lines.append("")
            lines.append("runs, newest first (\(recentRuns.count)):")
            for run in recentRuns {
                var line = "  \(Self.time(run.startedAt)) \(run.host) pid \(run.pid)  "
                if let summary = run.summary {
                    line +=
                        "exit \(summary.exitCode): claimed \(summary.claimed), done \(summary.done), deferred \(summary.deferred), "
                        + "failed \(summary.failed); \(summary.requests) requests, \(String(format: "%.1f", summary.seconds)) s"
                } else {
                    line += "not finished (still going, or the process died)"
                }
                lines.append(line)
            }
        }
        // Names and messages come from producers and servers: nothing in them may start a line or
        // drive the terminal.
        return lines.map(DisplayText.escaped).joined(separator: "\n")
    }

    /// A blank line, the title, and one indented line per item up to ``textListLimit``; nothing when empty.
    static func section<Item>(_ title: String, _ items: [Item], _ line: (Item) -> String) -> [String] {
        guard !items.isEmpty else { return [] }
        var lines = ["", title] + items.prefix(textListLimit).map { "  " + line($0) }
        if items.count > textListLimit {
            lines.append("  … and \(items.count - textListLimit) more (--json lists them all)")
        }
        return lines
    }

    static func describe(_ error: LastError) -> String {
        var text = error.reason
        if let step = error.step { text += " at \(step)" }
        if let status = error.httpStatus { text += " (HTTP \(status))" }
        if let message = error.message, !message.isEmpty { text += ": \(message)" }
        return text
    }

    static func time(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle())
    }

    /// `42s`, `5m 3s`, `2h 5m`, `3d 4h`.
    static func age(_ seconds: Double) -> String {
        let total = Int(max(0, seconds).rounded())
        let (days, hours, minutes, secs) = (total / 86_400, total % 86_400 / 3600, total % 3600 / 60, total % 60)
        if days > 0 { return "\(days)d \(hours)h" }
        if hours > 0 { return "\(hours)h \(minutes)m" }
        if minutes > 0 { return "\(minutes)m \(secs)s" }
        return "\(secs)s"
    }
}

extension SpoolStatus.LastError {
    init(_ failure: BundleFailure) {
        self.init(
            reason: failure.reason.rawValue, step: failure.step, httpStatus: failure.httpStatus,
            message: failure.message)
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}

/// The spool's folders listed once: count, bytes and oldest age of each, as `status` and the
/// metrics file show them.
struct SpoolBacklog: Sendable {
    var listings: [Spool.Folder: [SpoolEntry]]
    var folders: [String: SpoolStatus.Folder]

    /// The checkpoint store's rows of the bundles not done or failed, by name.
    var inFlight: [String: BundleState]
    /// Free bytes on the spool's file system, when they could be read.
    var freeBytes: Int64? = nil

    /// Bundles in `incoming/` whose next attempt is still to come (``IncomingQueue``).
    func waitingForRetry(now: Date) -> Int {
        IncomingQueue(incoming: listings[.incoming] ?? [], states: inFlight, now: now, minAge: .zero)
            .waitingForRetry.count
    }

    /// Ages in `incoming/` count from the store's first-seen times where it has them.
    static func list(_ spool: Spool, inFlight: [String: BundleState], now: Date) throws -> SpoolBacklog {
        let firstSeen = inFlight.mapValues(\.firstSeen)
        var backlog = SpoolBacklog(listings: [:], folders: [:], inFlight: inFlight)
        backlog.freeBytes = FileSystemSpace(of: spool.root)?.free
        for folder in [Spool.Folder.incoming, .processing, .done, .failed] {
            let entries = try spool.list(folder)
            backlog.listings[folder] = entries
            let oldest = entries.lazy.map { entry in
                folder == .incoming ? min(firstSeen[entry.name] ?? entry.modified, now) : entry.modified
            }.min()
            backlog.folders[folder.rawValue] = SpoolStatus.Folder(
                count: entries.count, bytes: entries.reduce(0) { $0 + $1.size },
                oldestAgeSeconds: oldest.map { max(0, now.timeIntervalSince($0)) })
        }
        return backlog
    }
}
