import Foundation
import Logging

extension SpoolStatus {
    /// Reads the spool and its checkpoint store: the shared database when `database` is set (from
    /// any host), else the spool's SQLite file. Throws ``SpoolError`` when a folder cannot be
    /// listed, ``CheckpointError`` when the shared database cannot be read.
    public static func gather(
        spool: Spool, minAge: Duration = .seconds(5), runs: Int = 0, now: Date = Date(),
        database: DatabaseSettings? = nil, apiURL: String? = nil
    ) async throws -> SpoolStatus {
        if let database {
            return try await PostgresCheckpoints.with(database, logger: commandLogger) { store in
                try await SpoolBinding.check(spool, store: try await store.storeIdentity(), bindIfUnbound: false)
                var status = try await gather(
                    spool: spool, ledger: store, minAge: minAge, runs: runs, now: now,
                    place: Place(database: database.url, exists: true), apiURL: apiURL)
                status.lastRunOfEachHost = try await store.lastFinishedRunOfEachHost().compactMap(LastRun.init)
                return status
            }
        }
        let databaseExists = FileManager.default.fileExists(atPath: spool.databasePath)
        // Only reads: as the worker's own user it reads as a run would (the WAL included); as anyone
        // else, or where nothing can be written, it reads the file as it is on disk and leaves
        // nothing behind (a status as root must not make files the worker then cannot use).
        let snapshot = databaseExists && !Self.mayOpenForWriting(spool)
        var (store, unreadable) = try openStore(spool, exists: databaseExists, snapshot: snapshot, now: now)
        // A copy read as it is may lack what is still in a WAL this user cannot read (a run in
        // progress): what cannot be read is unknown, not a reason to fail.
        if snapshot, let opened = store {
            do {
                _ = try opened.bundlesInFlight()
            } catch {
                store = nil
                unreadable = "\(error)"
            }
        }
        return try await gather(
            spool: spool, ledger: store, minAge: minAge, runs: runs, now: now,
            place: Place(
                database: spool.databasePath, exists: databaseExists, snapshot: snapshot, unreadable: unreadable),
            apiURL: apiURL)
    }

    /// Where the checkpoints were read, and how.
    struct Place {
        var database: String
        var exists: Bool
        var snapshot = false
        var unreadable: String? = nil
    }

    /// A command's own logger for the shared database's client: only what an operator must see.
    static var commandLogger: Logger {
        var logger = Logger(label: "dopesync")
        logger.logLevel = .error
        return logger
    }

    private static func gather(
        spool: Spool, ledger: (any CheckpointLedger)?, minAge: Duration, runs: Int, now: Date, place: Place,
        apiURL: String?
    ) async throws -> SpoolStatus {
        let inFlight = try await ledger?.bundlesInFlight() ?? [:]
        let backlog = try await SpoolBacklog.list(spool, inFlight: inFlight, now: now)
        // The same rules as a run's (``IncomingQueue``): what status calls due, a run takes.
        let queue = IncomingQueue(
            incoming: backlog.listings[.incoming] ?? [], states: inFlight, now: now, minAge: minAge)
        let waiting = queue.waitingForRetry.map { entry, state in
            Waiting(
                name: entry.name, session: state.sessionID, attempts: state.attempts,
                nextAttemptAt: state.nextAttemptAt ?? now, lastError: state.lastError.map { LastError($0) })
        }
        var status = SpoolStatus(
            spool: spool.root, database: place.database, databaseExists: place.exists, generatedAt: now,
            folders: backlog.folders,
            incoming: Incoming(
                dueNow: queue.due.count, waitingForRetry: queue.waitingForRetry.count,
                heldByMinAge: queue.heldByMinAge.count, minAgeSeconds: minAge / .seconds(1),
                mtimeInFuture: queue.mtimeInFuture.map { MtimeInFuture(name: $0.entry.name, secondsAhead: $0.ahead) },
                deferredInFuture: queue.deferredAhead.map { MtimeInFuture(name: $0.entry.name, secondsAhead: $0.ahead) }
            ),
            waiting: waiting,
            failed: try await failedBundles(backlog.listings[.failed] ?? [], spool: spool, ledger: ledger),
            claims: try await claims(backlog.listings[.processing] ?? [], spool: spool, ledger: ledger, now: now),
            lastRun: try await ledger?.lastFinishedRunOfEachHost().first.flatMap(LastRun.init),
            databaseReadAsSnapshot: place.snapshot, databaseUnreadable: place.unreadable,
            recentRuns: try await runs > 0 ? ledger?.recentRuns(limit: runs) : nil)
        if let ledger, let apiURL { try await nameOtherAPIs(in: &status, ledger: ledger, apiURL: apiURL) }
        if let ledger {
            status.halfSessions = Self.halfSessions(try await ledger.halfSessions(), in: backlog, now: now)
        }
        return status
    }

    /// The store's half sessions whose bundle is still in the spool, with the folder it is in (a
    /// bundle deleted by hand leaves its rows, not a session anyone can finish).
    static func halfSessions(_ sessions: [HalfSession], in backlog: SpoolBacklog, now: Date) -> [HalfSessionEntry] {
        var listed: [String: (folder: String, entry: SpoolEntry)] = [:]
        for folder in [Spool.Folder.incoming, .processing, .failed] {
            for entry in backlog.listings[folder] ?? [] { listed[entry.name] = (folder.rawValue, entry) }
        }
        return sessions.compactMap { half in
            listed[half.name].map { folder, entry in
                HalfSessionEntry(
                    name: half.name, folder: folder, session: half.sessionID, recordsOnServer: half.recordsOnServer,
                    recordsLeft: half.recordsLeft, since: half.since,
                    ageSeconds: now.timeIntervalSince(backlog.halfSessionStart(half.since, of: entry, now: now)))
            }
        }
    }

    /// Marks each listed bundle whose session's checkpoints were recorded against another API than
    /// `apiURL`'s: the ones a run will look up, or send, rather than resume.
    private static func nameOtherAPIs(in status: inout SpoolStatus, ledger: any CheckpointLedger, apiURL: String)
        async throws
    {
        let url = APIAddress.normalized(apiURL)
        let configured = try await ledger.apiBook(countingSessions: false).addresses[url] ?? url
        let sessions = status.failed.compactMap(\.session) + status.waiting.compactMap(\.session)
        guard !sessions.isEmpty else { return }
        let bindings = try await ledger.sessionBindings(of: sessions)
        func other(_ sessionID: String?) -> String? {
            guard let api = sessionID.flatMap({ bindings[$0]?.api }), api != configured else { return nil }
            return api
        }
        for index in status.failed.indices { status.failed[index].checkpointsAPI = other(status.failed[index].session) }
        for index in status.waiting.indices {
            status.waiting[index].checkpointsAPI = other(status.waiting[index].session)
        }
    }

    /// The store, opened for reading as this user may; nil with why, when it cannot be read.
    private static func openStore(_ spool: Spool, exists: Bool, snapshot: Bool, now: Date) throws -> (
        CheckpointStore?, unreadable: String?
    ) {
        guard exists else { return (nil, nil) }
        guard snapshot else { return (try CheckpointStore(spool: spool, now: now), nil) }
        do {
            return (try CheckpointStore(readingSnapshotOf: spool.databasePath), nil)
        } catch {
            // Most likely its 0600 mode: the folders still say most of what status shows.
            return (nil, "\(error)")
        }
    }

    /// `failed/`, oldest first: why each failed, from its sidecar, else from the database.
    private static func failedBundles(_ entries: [SpoolEntry], spool: Spool, ledger: (any CheckpointLedger)?)
        async throws -> [Failed]
    {
        let states = Dictionary(
            try await ledger?.bundles(withOutcome: .failed).map { ($0.name, $0) } ?? [], uniquingKeysWith: { a, _ in a }
        )
        // Each sidecar read on the spool's threads, as every spool call.
        return await SpoolCalls.run {
            entries.sorted { ($0.modified, $0.name) < ($1.modified, $1.name) }.map { entry in
                let state = states[entry.name]
                let sidecar = ErrorSidecar.read(from: spool.sidecarPath(forFailed: entry.name))
                let failure = sidecar?.failure ?? state?.lastError
                return Failed(
                    name: entry.name, session: sidecar?.session ?? state?.sessionID,
                    failedAt: sidecar?.failedAt ?? state?.updatedAt, reason: failure?.reason.rawValue,
                    step: failure?.step,
                    httpStatus: failure?.httpStatus, field: failure?.field, message: failure?.message,
                    attempts: sidecar?.attempts ?? state?.attempts, hasSidecar: sidecar != nil)
            }
        }
    }

    /// `processing/`, oldest first, with each claim's owner and whether it is alive: by its
    /// flock on one host; by its lease, on the shared database's clock, between hosts.
    private static func claims(_ entries: [SpoolEntry], spool: Spool, ledger: (any CheckpointLedger)?, now: Date)
        async throws -> [Claim]
    {
        let records = Dictionary(
            try await ledger?.claims().map { ($0.bundleName, $0) } ?? [], uniquingKeysWith: { a, _ in a })
        // Each claim's lock looked at on the spool's threads, as every spool call.
        return await SpoolCalls.run {
            entries.sorted { ($0.modified, $0.name) < ($1.modified, $1.name) }.compactMap { entry -> Claim? in
                let record = records[entry.name]
                if let record, let expires = record.leaseExpiresAt, let readAt = record.readAt {
                    var claim = Claim(
                        name: entry.name, host: record.owner.host, pid: record.owner.pid, runID: record.owner.runID,
                        claimedAt: record.claimedAt, ageSeconds: max(0, readAt.timeIntervalSince(record.claimedAt)),
                        ownerAlive: expires > readAt, leaseRemainingSeconds: expires.timeIntervalSince(readAt))
                    // A lease that ran out is taken over with a lock, which NFS may refuse (as below).
                    if expires <= readAt, case .notLockable(let ownerAndMode) = spool.lookAtClaim(entry) {
                        claim.notLockable = ownerAndMode
                    }
                    return claim
                }
                let (alive, unreadable, notLockable): (Bool, String?, String?)
                switch spool.lookAtClaim(entry) {
                case .held(let held): (alive, unreadable, notLockable) = (held, nil, nil)
                case .unreadable(let ownerAndMode): (alive, unreadable, notLockable) = (false, ownerAndMode, nil)
                case .notLockable(let ownerAndMode): (alive, unreadable, notLockable) = (false, nil, ownerAndMode)
                case .gone: return nil  // moved on since it was listed
                }
                let since = record?.claimedAt ?? entry.modified
                return Claim(
                    name: entry.name, host: record?.owner.host, pid: record?.owner.pid, runID: record?.owner.runID,
                    claimedAt: record?.claimedAt, ageSeconds: max(0, now.timeIntervalSince(since)), ownerAlive: alive,
                    unreadable: unreadable, notLockable: notLockable)
            }
        }
    }
}
