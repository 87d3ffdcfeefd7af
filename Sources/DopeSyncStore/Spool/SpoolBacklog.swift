import DopeSyncBundle
import DopeSyncSupport
import Foundation

/// The spool's folders listed once: count, bytes and oldest age of each, as `status` and the
/// metrics file show them.
package struct SpoolBacklog: Sendable {
    package var listings: [Spool.Folder: [SpoolEntry]]
    package var folders: [String: SpoolFolderStatus]

    /// The checkpoint store's rows of the bundles not done or failed, by name.
    var inFlight: [String: BundleState]

    /// Nothing listed: what a run that could not read its spool reports.
    package static let empty = SpoolBacklog(listings: [:], folders: [:], inFlight: [:])
    /// Free bytes on the spool's file system, when they could be read.
    package var freeBytes: Int64? { space?.free }
    package var space: FileSystemSpace? = nil

    /// Bundles in `incoming/` whose next attempt is still to come (``IncomingQueue``).
    package func waitingForRetry(now: Date) -> Int {
        IncomingQueue(incoming: listings[.incoming] ?? [], states: inFlight, now: now, minAge: .zero)
            .waitingForRetry.count
    }

    /// Bundles waiting for retry whose last error was the API's as a whole (no answer, a 5xx, a
    /// 408 or a 429), not one refusing this bundle (another 4xx) or the machine (`io_error`).
    /// While one waits, an idle run's look at the API proves nothing: health and a token check
    /// pass while the API's writes fail.
    package func waitingOnTheAPI(now: Date) -> Int {
        IncomingQueue(incoming: listings[.incoming] ?? [], states: inFlight, now: now, minAge: .zero)
            .waitingForRetry.filter { waiting in
                guard let error = waiting.state.lastError else { return true }
                if error.reason == .unreachable { return true }
                guard let status = error.httpStatus else { return false }
                return status >= 500 || status == 408 || status == 429
            }.count
    }

    /// The time a half session's age counts from: when its first record was created, unless that
    /// is ahead of `now` (a clock that has gone back since, ``WallClock``), then when the bundle
    /// was first seen, or its file's ctime, or else now. An age below 0 would keep the
    /// half-session alert silent for as long as the clock was ahead.
    package func halfSessionStart(_ since: Date, of entry: SpoolEntry, now: Date) -> Date {
        let believable = WallClock.latestBelievable(at: now)
        guard since > believable else { return since }
        return [inFlight[entry.name]?.firstSeen, entry.changed].lazy.compactMap { $0 }.first { $0 <= believable }
            ?? now
    }

    /// Ages in `incoming/` count from the store's first-seen times where it has them, unless one
    /// is ahead of `now` (recorded under a clock that has gone back since, ``WallClock``): an
    /// age of 0 for as long as the clock was ahead would keep the stuck-bundle alert silent.
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    package static func list(_ spool: Spool, inFlight: [String: BundleState], now: Date) throws -> SpoolBacklog {
        let believable = WallClock.latestBelievable(at: now)
        let firstSeen = inFlight.mapValues(\.firstSeen).filter { $0.value <= believable }
        var backlog = SpoolBacklog(listings: [:], folders: [:], inFlight: inFlight)
        backlog.space = FileSystemSpace(of: spool.root)
        // tmp/: producers' files still being written, which fill the disk as surely as bundles
        // (what `min-free-space` stops runs for); left out where this user cannot list it.
        if let files = try? spool.listAllFiles(.tmp) {
            let oldest = files.lazy.map(\.modified).min()
            backlog.folders[Spool.Folder.tmp.rawValue] = SpoolFolderStatus(
                count: files.count, bytes: files.reduce(0) { $0 + $1.size },
                oldestAgeSeconds: oldest.map { max(0, now.timeIntervalSince($0)) })
        }
        for folder in [Spool.Folder.incoming, .processing, .done, .failed] {
            let entries = try spool.list(folder)
            backlog.listings[folder] = entries
            // In incoming/, from when the worker first saw a bundle, or, for one it has not seen
            // yet, when it arrived (its ctime): a producer's mtime may be days old (`rsync -a`, a
            // device's own folder), and would fire the stuck-bundle alert at once.
            let oldest = entries.lazy.map { entry in
                folder == .incoming ? min(firstSeen[entry.name] ?? entry.changed, now) : entry.modified
            }.min()
            backlog.folders[folder.rawValue] = SpoolFolderStatus(
                count: entries.count, bytes: entries.reduce(0) { $0 + $1.size },
                oldestAgeSeconds: oldest.map { max(0, now.timeIntervalSince($0)) })
        }
        return backlog
    }
}

/// One folder of the spool as `status` and the metrics show it.
public struct SpoolFolderStatus: Sendable, Codable, Equatable {
    public var count: Int
    public var bytes: Int64
    /// Seconds since the oldest file's mtime; in `incoming/`, since the checkpoint database first
    /// saw it, which a file's mtime (its producer's clock) need not say. Nil when empty.
    public var oldestAgeSeconds: Double?
}
