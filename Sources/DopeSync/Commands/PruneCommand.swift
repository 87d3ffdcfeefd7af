import DopeSyncSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `dopesync prune --older-than DURATION [--spool DIR]`: deletes bundles from `done/` that got there more
/// than DURATION ago (by the checkpoint store's record of the move, else the file's mtime), and their checkpoint rows. It never looks
/// at another folder: `prune` is the only thing that deletes a bundle, and only a synced one.
///
/// Exit 0; 73 when `done/` cannot be read or a file cannot be deleted (the others are still deleted).
public enum PruneCommand {
    /// The times the store recorded bundles as done, by name, and the store to record them in
    /// (nil: none, or only a read-only copy could be opened).
    static func doneTimes(_ spool: Spool) -> (times: [String: Date], store: CheckpointStore?) {
        guard FileManager.default.fileExists(atPath: spool.databasePath) else { return ([:], nil) }
        // Prune is what frees a full disk, where a normal open may not even set up its connection:
        // then the file as it is on disk, and failing that, the files' own times.
        do {
            let store = try CheckpointStore(spool: spool)
            return (try store.doneTimes(), store)
        } catch {
            return ((try? CheckpointStore(readingSnapshotOf: spool.databasePath).doneTimes()) ?? [:], nil)
        }
    }

    /// Done times recorded ahead of this clock (``WallClock``), under a clock that has gone back
    /// since, are recorded as `now` by `restamp`, so that `older-than` counts from now rather than
    /// from a time this clock may not reach for months. Only where the kernel says this clock is
    /// synchronized (NTP): otherwise it may be this clock that is behind, the times right, and
    /// recording them as now would have the next prune, once the clock is set, delete them early.
    /// Returns the times to prune by, and a line for the report when any is ahead.
    static func recordingTimesAheadAsNow(
        _ doneAt: [String: Date], now: Date, olderThan: Duration,
        restamp: (() async throws(CheckpointError) -> Int)?
    ) async -> (doneAt: [String: Date], report: String?) {
        let believable = WallClock.latestBelievable(at: now)
        let ahead = doneAt.values.count { $0 > believable }
        guard ahead > 0 else { return (doneAt, nil) }
        let bundles = "\(ahead) bundle\(ahead == 1 ? " was" : "s were") recorded done ahead of this clock"
        guard SystemClock.isSynchronized else {
            return (doneAt, bundles + ", which is not synchronized (NTP): kept until it reaches their times")
        }
        guard let restamp else {
            return (doneAt, bundles + ", and the database cannot be written here: run prune as the worker's user")
        }
        do {
            _ = try await restamp()
        } catch {
            return (doneAt, bundles + ", and could not be recorded as done now: \(error)")
        }
        return (
            doneAt.mapValues { $0 > believable ? now : $0 },
            bundles + " (it has gone back since): counted as done now, so kept for "
                + "\(SpoolStatus.age(olderThan / .seconds(1))) from now"
        )
    }

    /// When a bundle in `done/` got there: as the store recorded it, else its file's mtime.
    static func doneTime(of entry: SpoolEntry, doneAt: [String: Date]) -> Date { doneAt[entry.name] ?? entry.modified }

    /// The bundles of `done` recorded done before `cutoff` (by `doneAt`, else their mtime), oldest first.
    static func prunable(_ done: [SpoolEntry], doneAt: [String: Date], before cutoff: Date) -> [SpoolEntry] {
        done.map { (entry: $0, at: doneTime(of: $0, doneAt: doneAt)) }
            .filter { $0.at < cutoff }
            .sorted { ($0.at, $0.entry.name) < ($1.at, $1.entry.name) }
            .map(\.entry)
    }

    public static func run(
        spoolRoot: String, olderThan: Duration, now: Date = Date(), database: DatabaseSettings? = nil
    ) async -> CommandOutcome {
        let spool = Spool(root: spoolRoot)
        let latest = WallClock.latestBelievable(at: now)
        if let database {
            return await withSharedLedger(database, spool: spool) { ledger in
                let (doneAt, report) = await recordingTimesAheadAsNow(
                    (try? await ledger.doneTimes()) ?? [:], now: now, olderThan: olderThan
                ) { () throws(CheckpointError) in try await ledger.restampDoneTimes(after: latest, to: now) }
                return await prune(spool, olderThan: olderThan, now: now, doneAt: doneAt, report: report) {
                    deleted throws(CheckpointError) in try await ledger.forget(names: deleted)
                }
            }
        }
        return await withSQLiteCheckpoints(spool, command: "prune") {
            let (times, store) = Self.doneTimes(spool)
            let (doneAt, report) = await recordingTimesAheadAsNow(
                times, now: now, olderThan: olderThan,
                restamp: store.map { store in
                    { () throws(CheckpointError) in try store.restampDoneTimes(after: latest, to: now) }
                })
            return await prune(spool, olderThan: olderThan, now: now, doneAt: doneAt, report: report) {
                deleted throws(CheckpointError) in
                guard FileManager.default.fileExists(atPath: spool.databasePath) else { return 0 }
                return try CheckpointStore(spool: spool, now: now).forget(names: deleted)
            }
        }
    }

    /// Deletes what `doneAt` (else the files' mtimes) says got to done/ before the cutoff, then
    /// has the store `forget` them.
    /// How many deleted bundles' rows one transaction forgets.
    static let forgetBatch = 500

    private static func prune(
        _ spool: Spool, olderThan: Duration, now: Date, doneAt: [String: Date], report: String?,
        forget: ([String]) async throws(CheckpointError) -> Int
    ) async -> CommandOutcome {
        let (seconds, attoseconds) = olderThan.components
        let cutoff = now.addingTimeInterval(-(Double(seconds) + Double(attoseconds) / 1e18))
        let old: [SpoolEntry]
        do {
            // When each got to done/: the store's record of it, since the move can set the file's
            // mtime only where the worker owns the file (a producer's keeps the producer's time).
            old = Self.prunable(try await spool.list(.done), doneAt: doneAt, before: cutoff)
        } catch {
            return CommandOutcome(output: "", diagnostics: "cannot read the spool: \(error)", status: .cannotCreate)
        }

        var lines: [String] = report.map { [$0] } ?? []
        var diagnostics: [String] = []
        var deleted: [String] = []
        var bytes: Int64 = 0
        for entry in old {
            let error = await spool.deleteDone(entry)
            if error == 0 {
                deleted.append(entry.name)
                bytes += entry.size
                lines.append("deleted done/\(entry.name) (\(entry.size) bytes)")
            } else if error != ENOENT {
                diagnostics.append(
                    "cannot delete \(spool.path(.done, entry.name)): \(String(cString: strerror(error)))")
            }
        }

        // In batches, each one transaction: it holds the SQLite file's write lock, or PostgreSQL's
        // lock on the claims, while it deletes, so a run on the spool (or another host's lease
        // renewals) waits for one batch at most, not for a prune of months of bundles.
        var forgotten = 0
        for start in stride(from: 0, to: deleted.count, by: Self.forgetBatch) {
            do {
                forgotten += try await forget(Array(deleted[start..<min(start + Self.forgetBatch, deleted.count)]))
            } catch {
                diagnostics.append("bundles deleted, but their checkpoint rows could not be: \(error)")
                break
            }
        }
        lines.append(
            "pruned \(deleted.count) bundle\(deleted.count == 1 ? "" : "s") from done/, \(bytes) bytes (\(ByteCount(bytes))); \(forgotten) checkpoint row\(forgotten == 1 ? "" : "s") forgotten"
        )
        // The empty lock files of sessions no bundle has held since the cutoff (``SessionHold``).
        let locks = await spool.pruneSessionHolds(before: cutoff)
        if locks > 0 {
            lines.append("removed \(locks) session lock\(locks == 1 ? "" : "s") in .sessions/ unused since then")
        }
        return CommandOutcome(
            output: lines.map(DisplayText.escaped).joined(separator: "\n"),
            diagnostics: diagnostics.isEmpty ? nil : diagnostics.joined(separator: "\n"),
            status: diagnostics.isEmpty ? .success : .cannotCreate)
    }
}
