import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import SQLiteSupport
import Testing

/// A bundle deferred after its session was created leaves that session on the server with only
/// some of its records (the API never deletes): `status`, its JSON and the metrics name it, and
/// stop once the bundle is done. In-process runs against the dev server, a real SQLite file.
@Suite struct HalfSessionTests {
    /// A sample whose first DOPE entry a firewall refuses (its notes), after its session is created.
    static func sampleRefusedAfterItsSession(seed: UInt64) -> (SampleSession, pattern: String) {
        let sample = SampleSession(seed: seed)
        return (sample, "wind from 3 o'clock, 0")
    }

    /// A spool in `directory` whose one bundle (a sample of `seed`) a run leaves deferred with
    /// only its session on the API (kept in `api`, a file, when given). Returns the sample, the
    /// spool and the run's metrics file.
    static func leaveAHalfSession(seed: UInt64, in directory: URL, api: String? = nil) async throws
        -> (SampleSession, Spool, metrics: String)
    {
        let (sample, pattern) = sampleRefusedAfterItsSession(seed: seed)
        let spool = try await makeSpool(in: directory, samples: [sample])
        let metrics = directory.appendingPathComponent("dopesync.prom").path
        var firewalled = DevServerConfiguration()
        firewalled.databasePath = api
        firewalled.forbiddenBodyPattern = pattern
        try await withDevServer(firewalled) { server async throws in
            let (summary, _) = await Worker(options: options(spool, server, metrics: metrics), logger: quietLogger)
                .run()
            #expect(summary.deferred == 1, "\(summary)")
        }
        return (sample, spool, metrics)
    }

    static func options(_ spool: Spool, _ server: RunningDevServer, metrics: String) -> RunOptions {
        var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
        options.minAge = .zero
        options.minFreeSpace = .bytes(0)
        options.retry.base = .milliseconds(1)
        options.retry.cap = .milliseconds(5)
        options.deferral = DeferralPolicy(base: .milliseconds(1), cap: .milliseconds(1), maxAttempts: 5)
        options.metricsFile = metrics
        return options
    }

    @Test(
        "status lists a half session after a deferral, with records there and left, and stops once the bundle is done")
    func statusListsAHalfSessionUntilDone() async throws {
        try await withTemporaryDirectory { directory in
            let api = directory.appendingPathComponent("api.sqlite").path
            let (sample, spool, metrics) = try await Self.leaveAHalfSession(seed: 9_600, in: directory, api: api)
            let name = try #require(try spool.names(.incoming).first)
            let status = try await SpoolStatus.gather(spool: spool, minAge: .zero)
            let half = try #require(status.halfSessions.first, "\(status.json())")
            #expect(status.halfSessions.count == 1)
            #expect(half.name == name && half.folder == "incoming" && half.session == sample.sessionID)
            #expect(half.recordsOnServer == 1, "the session only")
            #expect(half.recordsLeft == sample.expectedRequestCount - 1)
            #expect(half.ageSeconds >= 0 && half.ageSeconds < 60)
            #expect(status.text().contains("incomplete on the server (1)"), "\(status.text())")
            #expect(status.json().contains("\"halfSessions\""))
            let written = try String(contentsOfFile: metrics, encoding: .utf8)
            #expect(written.contains("dopesync_half_sessions 1\n"), "\(written)")
            #expect(written.contains("dopesync_half_session_oldest_age_seconds "), "\(written)")

            var open = DevServerConfiguration()
            open.databasePath = api
            try await withDevServer(open) { server async throws in
                let (summary, status) = await Worker(
                    options: Self.options(spool, server, metrics: metrics), logger: quietLogger
                ).run()
                #expect(status == .success && summary.done == 1, "\(summary)")
            }
            let after = try await SpoolStatus.gather(spool: spool, minAge: .zero)
            #expect(after.halfSessions.isEmpty, "\(after.json())")
            #expect(!after.text().contains("incomplete on the server"))
            let rewritten = try String(contentsOfFile: metrics, encoding: .utf8)
            #expect(rewritten.contains("dopesync_half_sessions 0\n"), "\(rewritten)")
            #expect(rewritten.contains("dopesync_half_session_oldest_age_seconds 0\n"), "\(rewritten)")
        }
    }

    @Test(
        "a half session whose first record was stamped under a clock a year ahead is aged from the bundle's first sight, not -1 year: the alert can fire"
    )
    func aHalfSessionStampedAheadOfTheClockHasAnAge() async throws {
        try await withTemporaryDirectory { directory in
            let (_, spool, _) = try await Self.leaveAHalfSession(seed: 9_610, in: directory)
            // The session's record as a clock a year ahead would have stamped it.
            try await onOwnThread { [path = spool.databasePath] in
                try SQLiteDatabase(path: path).write { connection in
                    try connection.execute("UPDATE steps SET done_at = done_at + 365 * 86400")
                }
            }
            let status = try await SpoolStatus.gather(spool: spool, minAge: .zero)
            let half = try #require(status.halfSessions.first, "\(status.json())")
            #expect(half.ageSeconds >= 0 && half.ageSeconds < 60, "\(half.ageSeconds)")
        }
    }
}
