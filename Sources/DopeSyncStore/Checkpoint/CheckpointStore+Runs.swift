import DopeSyncBundle
import DopeSyncSupport
import Foundation
import SQLiteSupport

/// The `runs` table: each run's start and summary.
extension CheckpointStore {
    // MARK: - Runs

    public func recordRunStarted(runID: String, host: String, pid: Int32, startedAt: Date = Date())
        throws(CheckpointError)
    {
        try write("recording run \(runID)") { connection in
            try connection.query(
                "INSERT OR REPLACE INTO runs (run_id, host, pid, started_at) VALUES (?, ?, ?, ?)",
                [runID, host, Int(pid), startedAt.timeIntervalSince1970])
        }
    }

    /// Records the run's summary. `healthy`: whether the run shows the API working (it ended 0 or 1,
    /// deferred nothing, and either claimed something or found nothing waiting for retry); nil
    /// when it was not judged (no metrics file asked for).
    public func recordRunFinished(
        runID: String, summary: RunSummary, healthy: Bool? = nil, apiLookups: Bool? = nil, finishedAt: Date = Date()
    ) throws(CheckpointError) {
        try write("recording the end of run \(runID)") { connection in
            try connection.query(
                """
                UPDATE runs SET finished_at = ?, claimed = ?, done = ?, deferred = ?, failed = ?, requests = ?, bytes = ?, seconds = ?, exit_code = ?,
                    healthy = ?, api_lookups = ?
                WHERE run_id = ?
                """,
                [
                    finishedAt.timeIntervalSince1970, summary.claimed, summary.done, summary.deferred, summary.failed,
                    summary.requests, summary.bytes, summary.seconds, Int(summary.exitCode), healthy, apiLookups, runID,
                ])
            if connection.changes == 0 {
                throw CheckpointError(code: .database, message: "run \(runID) was never recorded as started")
            }
        }
    }

    /// The most recently started run (it may still be going on, or have died: then `finishedAt` is nil).
    /// Runs started ahead of ``WallClock/latestBelievable(at:)`` count as older than the others,
    /// here and below: the clock went back since they started.
    public func lastRun() throws(CheckpointError) -> RunRecord? {
        try lastRun(finishedOnly: false)
    }

    /// The most recently started run that finished: the last summary line.
    public func lastFinishedRun() throws(CheckpointError) -> RunRecord? {
        try lastRun(finishedOnly: true)
    }

    /// When a run judged healthy last finished (see `recordRunFinished`).
    public func lastHealthyRunFinishedAt(notAfter latest: Date) throws(CheckpointError) -> Date? {
        try read("reading the last healthy run") { connection in
            let last: Double? = try connection.queryFirst(
                "SELECT max(finished_at) AS last FROM runs WHERE finished_at IS NOT NULL AND healthy = 1 AND finished_at <= ?",
                [latest.timeIntervalSince1970])?["last"]
            return last.map(Date.init(timeIntervalSince1970:))
        }
    }

    /// The `limit` runs started last, newest first: the history `status --runs N` shows.
    public func recentRuns(limit: Int) throws(CheckpointError) -> [RunRecord] {
        try runs(finishedOnly: false, limit: limit)
    }

    private func lastRun(finishedOnly: Bool) throws(CheckpointError) -> RunRecord? {
        try runs(finishedOnly: finishedOnly, limit: 1).first
    }

    private func runs(finishedOnly: Bool, limit: Int) throws(CheckpointError) -> [RunRecord] {
        try read("reading runs") { connection in
            // The believable first, then those started ahead of the clock: two walks of the
            // start-time index, not a sort of every run ever recorded.
            let latest = WallClock.latestBelievable(at: Date()).timeIntervalSince1970
            let finished = finishedOnly ? "AND finished_at IS NOT NULL" : ""
            var runs: [RunRecord] = []
            for side in ["started_at <= ?", "started_at > ?"] where runs.count < limit {
                runs += try connection.query(
                    """
                    SELECT run_id, host, pid, started_at, finished_at, claimed, done, deferred, failed, requests, bytes, seconds, exit_code,
                           api_lookups
                    FROM runs WHERE \(side) \(finished) ORDER BY started_at DESC, rowid DESC LIMIT ?
                    """, [latest, max(limit - runs.count, 0)]
                ).map(Self.runRecord)
            }
            return runs
        }
    }

    private static func runRecord(_ row: SQLiteRow) throws(SQLiteError) -> RunRecord {
        let finishedAt = (try row["finished_at"] as Double?).map(Date.init(timeIntervalSince1970:))
        // A finished run has every count (recordRunFinished writes them together).
        let summary: RunSummary? =
            finishedAt == nil
            ? nil
            : RunSummary(
                claimed: try row["claimed"], done: try row["done"], deferred: try row["deferred"],
                failed: try row["failed"], requests: try row["requests"], bytes: try row["bytes"],
                seconds: try row["seconds"], exitCode: try row["exit_code"])
        return RunRecord(
            runID: try row["run_id"], host: try row["host"], pid: try row["pid"],
            startedAt: Date(timeIntervalSince1970: try row["started_at"]), finishedAt: finishedAt,
            summary: summary, apiLookups: try row["api_lookups"])
    }
}
