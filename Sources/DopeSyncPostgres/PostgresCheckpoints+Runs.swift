import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport
import Foundation
import PostgresNIO
import Synchronization

/// The `runs` table (every host's runs, each with its host) and the reference lists' copies.
extension PostgresCheckpoints: CheckpointStorage {
    public func recordRunStarted(runID: String, host: String, pid: Int32) async throws(CheckpointError) {
        let now = Date().timeIntervalSince1970
        _ = try await rows(
            "recording run \(runID)",
            """
            INSERT INTO dopesync.runs (run_id, host, pid, started_at) VALUES (\(runID), \(host), \(Int(pid)), \(now))
            ON CONFLICT (run_id) DO NOTHING
            """)
    }

    public func recordRunFinished(runID: String, summary: RunSummary, healthy: Bool?, apiLookups: Bool?)
        async throws(CheckpointError)
    {
        let now = Date().timeIntervalSince1970
        let updated = try await rows(
            "recording the end of run \(runID)",
            """
            UPDATE dopesync.runs SET finished_at = \(now), claimed = \(summary.claimed), done = \(summary.done),
                deferred = \(summary.deferred), failed = \(summary.failed), requests = \(summary.requests),
                bytes = \(summary.bytes), seconds = \(summary.seconds), exit_code = \(Int(summary.exitCode)),
                healthy = \(healthy), api_lookups = \(apiLookups)
            WHERE run_id = \(runID) RETURNING run_id
            """)
        if updated.isEmpty {
            throw CheckpointError(code: .database, message: "run \(runID) was never recorded as started")
        }
    }

    public func lastHealthyRunFinishedAt(notAfter latest: Date) async throws(CheckpointError) -> Date? {
        let rows = try await rows(
            "reading the last healthy run",
            """
            SELECT max(finished_at) AS last FROM dopesync.runs
            WHERE finished_at IS NOT NULL AND healthy AND finished_at <= \(latest.timeIntervalSince1970)
            """)
        let last: Double? = try rows.first.flatMap { row throws(CheckpointError) in try Self.decode(row, "last") }
        return last.map(Date.init(timeIntervalSince1970:))
    }

    public func referenceLists() async throws(CheckpointError) -> [ReferenceList: CachedReferenceList] {
        var lists: [ReferenceList: CachedReferenceList] = [:]
        for row in try await rows(
            "reading the reference lists", "SELECT name, etag, body FROM dopesync.reference_lists")
        {
            guard let list = ReferenceList(rawValue: try Self.decode(row, "name")) else { continue }
            let body: ByteBuffer = try Self.decode(row, "body")
            lists[list] = CachedReferenceList(
                list: list, etag: try Self.decode(row, "etag"), body: Array(body.readableBytesView))
        }
        return lists
    }

    public func keepReferenceList(
        _ list: ReferenceList, etag: String?, body: [UInt8], failed: @escaping @Sendable (CheckpointError) -> Void
    ) {
        let now = Date().timeIntervalSince1970
        // Queued behind the results, as the SQLite writer queues it: no bundle waits for it.
        let queued = enqueue {
            do throws(CheckpointError) {
                _ = try await self.rows(
                    "keeping the \(list.rawValue) list", waitInVain: .asksFirst,
                    """
                    INSERT INTO dopesync.reference_lists (name, etag, body, read_at)
                    VALUES (\(list.rawValue), \(etag), \(ByteBuffer(bytes: body)), \(now))
                    ON CONFLICT (name) DO UPDATE SET etag = excluded.etag, body = excluded.body, read_at = excluded.read_at
                    """)
            } catch {
                failed(error)
            }
        }
        if !queued { failed(CheckpointWriter.stopped) }
    }
}
