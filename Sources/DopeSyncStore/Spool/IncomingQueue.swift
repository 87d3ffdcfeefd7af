import DopeSyncBundle
import DopeSyncSupport
import Foundation

/// What `incoming/` holds for a run at one moment: the bundles due now, in the order they are
/// taken, and those that wait, with why. One value computed from the folder's listing and the
/// checkpoint store's rows, so `run`, `status` and the metrics file always agree.
///
/// The rules:
/// - a bundle deferred by a run waits until the next-attempt time the store recorded, whoever
///   owns the file (the worker cannot set the time of a file it does not own, so the time is
///   never kept in the file); a file modified after it was given back (`touch`, or written anew)
///   is due at once;
/// - a deferral recorded at a time this clock has not reached yet (by more than
///   ``WallClock/stepTolerance``) is due at once: the clock went back since (a kiosk that booted with
///   its clock a year ahead, then was set right), and its wait would last as long as the clock was
///   ahead;
/// - a file modified less than `min-age` ago waits for its producer to finish (docs/job-file.md, `min-age`); a file
///   whose mtime is in the future (a producer's clock ahead) is judged by its ctime instead,
///   which the kernel sets when the file arrives or changes and no producer can set ahead;
/// - the due are taken in the order the worker first saw them: the store's first-seen time for a
///   bundle it knows, else the file's ctime, which the kernel sets when the file arrives (a
///   rename into `incoming/`) and no producer can set back, unlike its mtime.
public struct IncomingQueue: Sendable {
    /// Due now, in the order a run takes them.
    public private(set) var due: [SpoolEntry] = []
    /// Deferred, with the next-attempt time the store holds; soonest first.
    public private(set) var waitingForRetry: [(entry: SpoolEntry, state: BundleState)] = []
    /// Modified less than `min-age` ago; due once it has passed.
    public private(set) var heldByMinAge: [SpoolEntry] = []
    /// When the first of ``heldByMinAge`` comes due, unless it changes again meanwhile.
    public private(set) var firstHeldComesDue: Date?
    /// Files whose mtime is ahead of this clock (by more than a second), with by how much: their
    /// producer's clock is wrong. Judged by their ctime, not held until then.
    public private(set) var mtimeInFuture: [(entry: SpoolEntry, ahead: TimeInterval)] = []
    /// Deferred bundles due now because their deferral was recorded ahead of this clock, with by
    /// how much: the clock went back since. (Also in ``due``.)
    public private(set) var deferredAhead: [(entry: SpoolEntry, ahead: TimeInterval)] = []

    /// - Parameters:
    ///   - incoming: `incoming/`'s listing (``Spool/list(_:)``).
    ///   - states: the store's rows of bundles not yet done or failed, by name.
    public init(incoming: [SpoolEntry], states: [String: BundleState], now: Date, minAge: Duration) {
        let minAgeSeconds = minAge / .seconds(1)
        var due: [(entry: SpoolEntry, arrived: Date)] = []
        for entry in incoming {
            let state = states[entry.name]
            let ahead = entry.modified.timeIntervalSince(now)
            if ahead > 1 { mtimeInFuture.append((entry, ahead)) }
            if let state, let next = Self.retryTime(of: entry, state: state, now: now), next > now {
                waitingForRetry.append((entry, state))
            } else if case let comesDue = Self.lastChange(of: entry, now: now).addingTimeInterval(minAgeSeconds),
                comesDue > now
            {
                heldByMinAge.append(entry)
                firstHeldComesDue = min(firstHeldComesDue ?? comesDue, comesDue)
            } else {
                due.append((entry, Self.arrival(of: entry, state: state)))
                if let state, state.lastOutcome == .deferred, Self.recordedAhead(state, now: now) {
                    deferredAhead.append((entry, state.updatedAt.timeIntervalSince(now)))
                }
            }
        }
        self.due = due.sorted { ($0.arrived, $0.entry.name) < ($1.arrived, $1.entry.name) }.map(\.entry)
        waitingForRetry.sort {
            ($0.state.nextAttemptAt ?? now, $0.entry.name) < ($1.state.nextAttemptAt ?? now, $1.entry.name)
        }
    }

    /// The next-attempt time that holds `entry` back, if one does: its deferral's, unless the file
    /// changed after it was given back. (A file an earlier version deferred has its next attempt
    /// as its mtime, in the future: that is its time.)
    static func retryTime(of entry: SpoolEntry, state: BundleState, now: Date) -> Date? {
        guard state.lastOutcome == .deferred, let next = state.nextAttemptAt else { return nil }
        // Recorded in this clock's future: the clock went back, and the wait is taken as over.
        if recordedAhead(state, now: now) { return nil }
        if entry.modified <= state.updatedAt { return next }
        return entry.modified > now ? entry.modified : nil
    }

    /// Whether `state` was recorded ahead of `now` beyond ``WallClock/stepTolerance``.
    static func recordedAhead(_ state: BundleState, now: Date) -> Bool {
        state.updatedAt > WallClock.latestBelievable(at: now)
    }

    /// When the file last changed, for `min-age`: its mtime, unless that is in the future; then
    /// its ctime (a clock no producer sets).
    ///
    /// A ctime more than a day ahead of this clock too (``WallClock/fileClockTolerance``) was set
    /// by a clock that has gone back since, and no write has come since (a write would have set it
    /// to now): the file is taken as changed long ago, or `min-age` would hold it until the clock
    /// caught up, months on.
    static func lastChange(of entry: SpoolEntry, now: Date) -> Date {
        guard entry.modified > now else { return entry.modified }
        return entry.changed.timeIntervalSince(now) > WallClock.fileClockTolerance
            ? .distantPast : min(entry.changed, now)
    }

    /// When the worker first saw the bundle.
    package static func arrival(of entry: SpoolEntry, state: BundleState?) -> Date {
        min(state?.firstSeen ?? entry.changed, entry.changed)
    }
}
