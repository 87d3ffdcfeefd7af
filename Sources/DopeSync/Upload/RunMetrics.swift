import DopeSyncSupport
import Foundation

/// What `dopesync run --metrics-file PATH` leaves behind: a Prometheus textfile for
/// node_exporter's textfile collector (`--collector.textfile.directory`), so an alert can fire
/// on "no successful run for an hour" or "failed/ is not empty" without anyone logging in.
///
/// Written under a temporary dot-name in the same folder, then renamed: the collector reads only
/// `*.prom` files and never sees half a file.
public struct RunMetrics: Sendable {
    public var finishedAt: Date
    /// The last run judged healthy (this one or an earlier one): it ended with exit 0 or 1,
    /// deferred nothing, and either claimed something, found nothing waiting for retry, or
    /// looked at the API itself (an idle run's check) and found it working. An idle run while
    /// bundles wait out their back-off after an outage that did not reach the API proves
    /// nothing, so it does not count: during an outage this time stops moving.
    public var lastSuccessAt: Date?
    public var summary: RunSummary
    /// The spool after the run, listed as `status` lists it.
    var backlog: SpoolBacklog
    var waitingForRetry: Int
    /// Free bytes on the spool's file system, when they could be read.
    var freeBytes: Int64?
    /// `min-free-space` in bytes of that file system, when its size could be read.
    var floorBytes: Int64?
    /// Bundles whose session is on the server but incomplete; nil when the store could not say.
    var halfSessions: [SpoolStatus.HalfSessionEntry]?
    /// For each bundle this run moved to done/, the seconds from its arrival in `incoming/` (when
    /// the worker first saw it) to done/.
    var syncSeconds: [Double] = []
    /// The histogram's upper bounds, in seconds: from a path unit's seconds to a day of retries.
    static let syncBuckets: [Double] = [1, 5, 15, 60, 300, 900, 3600, 21_600, 86_400]

    init(
        finishedAt: Date, lastSuccessAt: Date?, summary: RunSummary, backlog: SpoolBacklog,
        floor: FreeSpaceFloor? = nil
    ) {
        self.finishedAt = finishedAt
        self.lastSuccessAt = lastSuccessAt
        self.summary = summary
        self.backlog = backlog
        self.waitingForRetry = backlog.waitingForRetry(now: finishedAt)
        self.freeBytes = backlog.freeBytes
        if let floor, let space = backlog.space { self.floorBytes = floor.bytes(ofTotal: space.total) }
    }

    /// Writes the metrics file of a run that ended before it began (the spool, the store or the
    /// settings refused it): its exit code, the spool's backlog as it is, and the last success
    /// the file held before. On the spool's threads (it lists folders, renames a file).
    public static func writeEndedBeforeStarting(
        to path: String, spool: Spool, summary: RunSummary, floor: FreeSpaceFloor?
    ) async -> Result<Void, any Error> {
        await SpoolCalls.run { () -> Result<Void, any Error> in
            let now = Date()
            let backlog = (try? SpoolBacklog.list(spool, inFlight: [:], now: now)) ?? SpoolBacklog.empty
            let metrics = RunMetrics(
                finishedAt: now, lastSuccessAt: RunMetrics.lastSuccess(inFile: path, now: now), summary: summary,
                backlog: backlog, floor: floor)
            return Result { try metrics.write(to: path) }
        }
    }

    /// Lists the spool after a run (ages in `incoming/` from the database's first-seen times).
    static func backlog(of spool: Spool, inFlight: [String: BundleState], now: Date = Date()) throws -> SpoolBacklog {
        try SpoolBacklog.list(spool, inFlight: inFlight, now: now)
    }

    /// Whether a run shows the API working, given the spool after it (see `lastSuccessAt`). An
    /// idle run while bundles wait for retry shows it only when its own look at the API
    /// (`apiChecked`: health and token) passed and none waits on the API's own failure (a 5xx,
    /// no answer): one bundle the API keeps refusing for hours is then `DopeSyncIncomingStuck`'s
    /// to report, not an outage's, while an API whose writes fail stays an outage.
    static func isHealthy(_ summary: RunSummary, waitingForRetry: Int, apiChecked: Bool = false) -> Bool {
        [ExitStatus.success.rawValue, ExitStatus.bundlesFailed.rawValue].contains(summary.exitCode)
            && summary.deferred == 0 && (summary.claimed > 0 || waitingForRetry == 0 || apiChecked)
    }

    /// The textfile, in Prometheus' exposition format.
    public func text() -> String {
        var out = ""
        func metric(_ name: String, _ help: String, _ samples: [(labels: String, value: Double)]) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) gauge\n"
            for sample in samples { out += "\(name)\(sample.labels) \(Self.format(sample.value))\n" }
        }
        metric(
            "dopesync_last_run_timestamp_seconds", "When the last dopesync run finished (Unix time).",
            [("", finishedAt.timeIntervalSince1970)])
        metric(
            "dopesync_last_success_timestamp_seconds",
            "When a healthy run last finished: exit 0 or 1, nothing deferred, and work done or none waiting (Unix time; 0 never).",
            [("", lastSuccessAt?.timeIntervalSince1970 ?? 0)])
        metric("dopesync_last_run_duration_seconds", "How long the last run took.", [("", summary.seconds)])
        metric(
            "dopesync_last_run_exit_code",
            "The last run's exit code (man dopesync, EXIT STATUS: 0 ok, 1 bundles failed, 73 spool or disk, "
                + "75 API or database down, 76 TLS not trusted, 77 credentials refused, 78 configuration).",
            [("", Double(summary.exitCode))])
        metric("dopesync_last_run_claimed_bundles", "Bundles the last run claimed.", [("", Double(summary.claimed))])
        metric(
            "dopesync_last_run_bundles", "Bundles of the last run by outcome.",
            [
                ("{outcome=\"done\"}", Double(summary.done)), ("{outcome=\"deferred\"}", Double(summary.deferred)),
                ("{outcome=\"failed\"}", Double(summary.failed)),
            ])
        metric(
            "dopesync_last_run_requests", "HTTP requests the last run sent, retries included.",
            [("", Double(summary.requests))])
        metric("dopesync_last_run_sent_bytes", "Request body bytes the last run sent.", [("", Double(summary.bytes))])
        let folders = ["tmp", "incoming", "processing", "done", "failed"].compactMap { name in
            backlog.folders[name].map { ("{folder=\"\(name)\"}", $0) }
        }
        metric(
            "dopesync_spool_bundles", "Bundles in each spool folder after the last run.",
            folders.map { ($0.0, Double($0.1.count)) })
        metric(
            "dopesync_spool_bytes", "Bytes of the bundles in each spool folder after the last run.",
            folders.map { ($0.0, Double($0.1.bytes)) })
        metric(
            "dopesync_spool_oldest_age_seconds",
            "Age of the oldest bundle in each spool folder (0 when empty); in incoming, counted from when it was first seen.",
            folders.map { ($0.0, $0.1.oldestAgeSeconds ?? 0) })
        if let freeBytes {
            metric(
                "dopesync_spool_free_bytes", "Free bytes on the spool's file system after the last run.",
                [("", Double(freeBytes))])
        }
        if let floorBytes {
            metric(
                "dopesync_spool_min_free_bytes",
                "The min-free-space floor in bytes: below it a run claims nothing (exit 73).",
                [("", Double(floorBytes))])
        }
        if let halfSessions {
            metric(
                "dopesync_half_sessions",
                "Bundles whose session is on the server with only some of its records (status lists them).",
                [("", Double(halfSessions.count))])
            metric(
                "dopesync_half_session_oldest_age_seconds",
                "Age of the oldest such session, from its first record on the server (0 when none).",
                [("", halfSessions.map(\.ageSeconds).max() ?? 0)])
        }
        out += syncHistogram
        metric(
            "dopesync_spool_waiting_for_retry_bundles",
            "Deferred bundles in incoming/ whose next attempt is still to come.",
            [("", Double(waitingForRetry))])
        return out
    }

    /// `dopesync_bundle_sync_seconds`: the time from arrival in incoming/ to done/ of the last
    /// run's bundles, as a histogram.
    private var syncHistogram: String {
        var out =
            "# HELP dopesync_bundle_sync_seconds Time from a bundle's arrival in incoming/ to done/, "
            + "for the bundles of the last run.\n# TYPE dopesync_bundle_sync_seconds histogram\n"
        for bound in Self.syncBuckets {
            let count = syncSeconds.count { $0 <= bound }
            out += "dopesync_bundle_sync_seconds_bucket{le=\"\(Self.format(bound))\"} \(count)\n"
        }
        out += "dopesync_bundle_sync_seconds_bucket{le=\"+Inf\"} \(syncSeconds.count)\n"
        out += "dopesync_bundle_sync_seconds_sum \(Self.format(syncSeconds.reduce(0, +)))\n"
        out += "dopesync_bundle_sync_seconds_count \(syncSeconds.count)\n"
        return out
    }

    /// The last success time an earlier run wrote into `path`, if it can be read (for a run that
    /// cannot read the checkpoint database), unless it is ahead of `now` (``WallClock``).
    static func lastSuccess(inFile path: String, now: Date = Date()) -> Date? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let prefix = "dopesync_last_success_timestamp_seconds "
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") where line.hasPrefix(prefix) {
            guard let seconds = Double(line.dropFirst(prefix.count)), seconds > 0,
                case let time = Date(timeIntervalSince1970: seconds), time <= WallClock.latestBelievable(at: now)
            else { return nil }
            return time
        }
        return nil
    }

    /// Writes the file atomically (a temporary dot-name in the same folder, then a rename).
    public func write(to path: String) throws {
        try FileSystem.writeAtomically(to: path, temporaryDirectory: FileSystem.directory(of: path), replace: true) {
            descriptor in
            try FileSystem.writeAll(Array(text().utf8), to: descriptor, path: path)
        }
    }

    /// Integers without a decimal point; times with millisecond precision.
    static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(format: "%.3f", value)
    }
}
