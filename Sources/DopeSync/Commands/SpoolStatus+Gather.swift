import Foundation

extension SpoolStatus {
    /// Reads the spool and its checkpoint database. Throws ``SpoolError`` when a folder cannot be listed.
    public static func gather(spool: Spool, minAge: Duration = .seconds(5), runs: Int = 0, now: Date = Date()) throws
        -> SpoolStatus
    {
        let databaseExists = FileManager.default.fileExists(atPath: spool.databasePath)
        // Only reads: as the worker's own user it reads as a run would (the WAL included); as anyone
        // else, or where nothing can be written, it reads the file as it is on disk and leaves
        // nothing behind (a status as root must not make files the worker then cannot use).
        let snapshot = databaseExists && !Self.mayOpenForWriting(spool)
        var (store, unreadable) = try openStore(spool, exists: databaseExists, snapshot: snapshot, now: now)
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
        // The same rules as a run's (``IncomingQueue``): what status calls due, a run takes.
        let queue = IncomingQueue(
            incoming: backlog.listings[.incoming] ?? [], states: inFlight, now: now, minAge: minAge)
        let waiting = queue.waitingForRetry.map { entry, state in
            Waiting(
                name: entry.name, attempts: state.attempts, nextAttemptAt: state.nextAttemptAt ?? now,
                lastError: state.lastError.map { LastError($0) })
        }
        return SpoolStatus(
            spool: spool.root, database: spool.databasePath, databaseExists: databaseExists, generatedAt: now,
            folders: backlog.folders,
            incoming: Incoming(
                dueNow: queue.due.count, waitingForRetry: queue.waitingForRetry.count,
                heldByMinAge: queue.heldByMinAge.count, minAgeSeconds: minAge / .seconds(1)),
            waiting: waiting, failed: try failedBundles(backlog.listings[.failed] ?? [], spool: spool, store: store),
            claims: try claims(backlog.listings[.processing] ?? [], spool: spool, store: store, now: now),
            lastRun: try store?.lastFinishedRun().flatMap(LastRun.init), databaseReadAsSnapshot: snapshot,
            databaseUnreadable: unreadable, recentRuns: try runs > 0 ? store?.recentRuns(limit: runs) : nil)
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
    private static func failedBundles(_ entries: [SpoolEntry], spool: Spool, store: CheckpointStore?) throws
        -> [Failed]
    {
        let states =
            try store.map {
                try Dictionary($0.bundles(withOutcome: .failed).map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
            } ?? [:]
        return entries.sorted { ($0.modified, $0.name) < ($1.modified, $1.name) }.map { entry in
            let state = states[entry.name]
            let sidecar = ErrorSidecar.read(from: spool.sidecarPath(forFailed: entry.name))
            let failure = sidecar?.failure ?? state?.lastError
            return Failed(
                name: entry.name, session: sidecar?.session ?? state?.sessionID,
                failedAt: sidecar?.failedAt ?? state?.updatedAt, reason: failure?.reason.rawValue, step: failure?.step,
                httpStatus: failure?.httpStatus, field: failure?.field, message: failure?.message,
                attempts: sidecar?.attempts ?? state?.attempts, hasSidecar: sidecar != nil)
        }
    }

    /// `processing/`, oldest first, with each claim's owner and whether it is alive.
    private static func claims(_ entries: [SpoolEntry], spool: Spool, store: CheckpointStore?, now: Date) throws
        -> [Claim]
    {
        let records =
            try store.map { try Dictionary($0.claims().map { ($0.bundleName, $0) }, uniquingKeysWith: { a, _ in a }) }
            ?? [:]
        return entries.sorted { ($0.modified, $0.name) < ($1.modified, $1.name) }.compactMap { entry -> Claim? in
            guard let alive = spool.isClaimHeld(entry) else { return nil }  // moved on since it was listed
            let record = records[entry.name]
            let since = record?.claimedAt ?? entry.modified
            return Claim(
                name: entry.name, host: record?.owner.host, pid: record?.owner.pid, runID: record?.owner.runID,
                claimedAt: record?.claimedAt, ageSeconds: max(0, now.timeIntervalSince(since)), ownerAlive: alive)
        }
    }
}
