import Foundation

/// What `dopesync run --metrics-file PATH` leaves behind: a Prometheus textfile for
/// node_exporter's textfile collector (`--collector.textfile.directory`), so an alert can fire
/// on "no successful run for an hour" or "failed/ is not empty" without anyone logging in.
///
/// Written under a temporary dot-name in the same folder, then renamed: the collector reads only
/// `*.prom` files and never sees half a file.
public struct RunMetrics: Sendable, Equatable {
    public struct Folder: Sendable, Equatable {
        public var bundles: Int
        public var bytes: Int64
        public var oldestAgeSeconds: Double
    }

    public var finishedAt: Date
    /// The last run judged healthy (this one or an earlier one): it ended with exit 0 or 1,
    /// deferred nothing, and either claimed something or found nothing waiting for retry. An
    /// idle run while bundles wait out their back-off after an outage proves nothing, so it
    /// does not count: during an outage this time stops moving, which is what an alert wants.
    public var lastSuccessAt: Date?
    public var summary: RunSummary
    public var spool: SpoolSnapshot

    public static func == (a: RunMetrics, b: RunMetrics) -> Bool {
        a.text() == b.text()
    }

    /// The backlog per folder, listed once at the end of a run.
    public struct SpoolSnapshot: Sendable {
        public var folders: [(name: String, folder: Folder)]
        public var waitingForRetry: Int

        /// Ages in `incoming/` count from when the checkpoint database first saw the bundle: a
        /// deferred bundle's mtime is its next attempt, in the future, and would read as new.
        static func take(of spool: Spool, store: CheckpointStore, now: Date = Date()) throws -> SpoolSnapshot {
            let firstSeen = Dictionary(
                try store.bundles(withOutcome: .deferred).map { ($0.name, $0.firstSeen) }, uniquingKeysWith: { a, _ in a })
            var folders: [(String, Folder)] = []
            var waiting = 0
            for folder in [Spool.Folder.incoming, .processing, .done, .failed] {
                let entries = try spool.list(folder)
                var oldest: Date?
                for entry in entries {
                    var since = entry.modified
                    if folder == .incoming {
                        if entry.modified > now { waiting += 1 }
                        since = min(firstSeen[entry.name] ?? entry.modified, now)
                    }
                    oldest = min(oldest ?? since, since)
                }
                folders.append((folder.rawValue, Folder(
                    bundles: entries.count, bytes: entries.reduce(0) { $0 + $1.size },
                    oldestAgeSeconds: oldest.map { max(0, now.timeIntervalSince($0)) } ?? 0)))
            }
            return SpoolSnapshot(folders: folders, waitingForRetry: waiting)
        }
    }

    /// Whether a run shows the API working, given the spool after it (see `lastSuccessAt`).
    static func isHealthy(_ summary: RunSummary, after spool: SpoolSnapshot) -> Bool {
        [ExitStatus.success.rawValue, ExitStatus.bundlesFailed.rawValue].contains(summary.exitCode)
            && summary.deferred == 0 && (summary.claimed > 0 || spool.waitingForRetry == 0)
    }

    /// The textfile, in Prometheus' exposition format.
    public func text() -> String {
        var out = ""
        func metric(_ name: String, _ help: String, _ samples: [(labels: String, value: Double)]) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) gauge\n"
            for sample in samples { out += "\(name)\(sample.labels) \(Self.format(sample.value))\n" }
        }
        metric("dopesync_last_run_timestamp_seconds", "When the last dopesync run finished (Unix time).", [("", finishedAt.timeIntervalSince1970)])
        metric("dopesync_last_success_timestamp_seconds",
               "When a healthy run last finished: exit 0 or 1, nothing deferred, and work done or none waiting (Unix time; 0 never).",
               [("", lastSuccessAt?.timeIntervalSince1970 ?? 0)])
        metric("dopesync_last_run_duration_seconds", "How long the last run took.", [("", summary.seconds)])
        metric("dopesync_last_run_exit_code", "The last run's exit code (WORKER.md: 0 ok, 1 bundles failed, 75 API down, 77 credentials refused).",
               [("", Double(summary.exitCode))])
        metric("dopesync_last_run_claimed_bundles", "Bundles the last run claimed.", [("", Double(summary.claimed))])
        metric("dopesync_last_run_bundles", "Bundles of the last run by outcome.",
               [("{outcome=\"done\"}", Double(summary.done)), ("{outcome=\"deferred\"}", Double(summary.deferred)),
                ("{outcome=\"failed\"}", Double(summary.failed))])
        metric("dopesync_last_run_requests", "HTTP requests the last run sent, retries included.", [("", Double(summary.requests))])
        metric("dopesync_last_run_sent_bytes", "Request body bytes the last run sent.", [("", Double(summary.bytes))])
        metric("dopesync_spool_bundles", "Bundles in each spool folder after the last run.",
               spool.folders.map { ("{folder=\"\($0.name)\"}", Double($0.folder.bundles)) })
        metric("dopesync_spool_bytes", "Bytes of the bundles in each spool folder after the last run.",
               spool.folders.map { ("{folder=\"\($0.name)\"}", Double($0.folder.bytes)) })
        metric("dopesync_spool_oldest_age_seconds",
               "Age of the oldest bundle in each spool folder (0 when empty); in incoming, counted from when it was first seen.",
               spool.folders.map { ("{folder=\"\($0.name)\"}", $0.folder.oldestAgeSeconds) })
        metric("dopesync_spool_waiting_for_retry_bundles", "Deferred bundles in incoming/ whose next attempt is still to come.",
               [("", Double(spool.waitingForRetry))])
        return out
    }

    /// Writes the file atomically (a temporary dot-name in the same folder, then a rename).
    public func write(to path: String) throws {
        try FileSystem.writeAtomically(to: path, temporaryDirectory: FileSystem.directory(of: path), replace: true) { descriptor in
            try FileSystem.writeAll(Array(text().utf8), to: descriptor, path: path)
        }
    }

    /// Integers without a decimal point; times with millisecond precision.
    static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(format: "%.3f", value)
    }
}
