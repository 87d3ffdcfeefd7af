import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// A machine whose clock was far ahead, then set right: a kiosk without a battery-backed clock
/// that booted with a wrong date, a run under it, and NTP after. The run's wall clock is moved by
/// a preloaded shim (``ClockAhead``); everything else is real.
@Suite struct ClockWentBackTests {
    /// A spool in `directory` holding `samples`, each file written an hour ago: `status`'s and a
    /// run's min-age hold nothing back. Returns it with the samples' file names.
    static func spoolWrittenAnHourAgo(in directory: URL, _ samples: [SampleSession]) async throws
        -> (Spool, names: [String])
    {
        let spool = try await makeSpool(in: directory, samples: samples)
        let names = samples.map { "\($0.sessionID).tar.gz" }
        for name in names {
            try FileManager.default.setAttributes(
                [.modificationDate: Date().addingTimeInterval(-3600)], ofItemAtPath: spool.path(.incoming, name))
        }
        return (spool, names)
    }

    @Test(
        "a bundle deferred while the clock was a year ahead is due once the clock is set right, not a year later; status says why"
    )
    func aDeferralFromAClockAheadDoesNotHoldTheBundle() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 9_880)
            let (spool, _) = try await Self.spoolWrittenAnHourAgo(in: directory, [sample])
            let aYearAhead = try await ClockAhead(in: directory, by: .seconds(365 * 86_400)).environment
            try await withDevServer { server in
                // While the clock is wrong, the API asks for an hour's pause (a 429 with a
                // Retry-After longer than a run waits): the bundle is deferred, its next attempt
                // a year and a minute from the real now.
                try await server.putJSON("/admin/faults", ["rateLimitRate": 1, "retryAfterSeconds": 3600])
                let (ahead, aheadOutput) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, environment: aYearAhead)
                #expect(ahead == 0, "\(aheadOutput)")
                #expect(aheadOutput.contains("1 deferred"), "\(aheadOutput)")
                let waiting = try CheckpointStore(spool: spool).bundlesInFlight().values.first
                #expect(
                    (waiting?.nextAttemptAt?.timeIntervalSinceNow ?? 0) > 365 * 86_400, "deferred by the clock ahead")

                let shown = try await runBuilt("dopesync", ["status", "--spool", spool.root])
                #expect(shown.stdout.contains("1 due now, 0 waiting for retry"), "\(shown.stdout)")
                #expect(
                    shown.stdout.contains("deferred in the future (1): this clock went back since; due now"),
                    "\(shown.stdout)")
                try await server.putJSON("/admin/faults", ["rateLimitRate": 0])
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == 0, "\(output)")
                #expect(output.contains("the clock went back since"), "the run says why it is due: \(output)")
                try await expectAllSyncedOnce([sample], spool: spool, server: server)
            }
        }
    }

    @Test(
        "a bundle first seen while the clock was 10 days behind, then set forward by NTP: deferred again, not given up as 10 days old"
    )
    func aClockSetForwardDoesNotAgeADeferredBundle() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 9_895)
            let (spool, names) = try await Self.spoolWrittenAnHourAgo(in: directory, [sample])
            let name = names[0]
            // A kiosk without a battery-backed clock, booted 10 days behind, before NTP.
            let tenDaysBehind = try await ClockAhead(in: directory, by: .seconds(-10 * 86_400), synchronized: false)
                .environment
            let setRight = try await ClockAhead(in: directory, by: .zero, synchronized: true).environment
            try await withDevServer { server in
                // The API asks for a pause longer than a run waits, before and after the clock is set.
                try await server.putJSON("/admin/faults", ["rateLimitRate": 1, "retryAfterSeconds": 60])
                let (behind, behindOutput) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, environment: tenDaysBehind)
                #expect(behind == 0, "\(behindOutput)")
                #expect(behindOutput.contains("1 deferred"), "\(behindOutput)")
                let firstSeen = try #require(try CheckpointStore(spool: spool).bundleState(name: name)?.firstSeen)
                #expect(firstSeen.timeIntervalSinceNow < -9 * 86_400, "first seen by the clock behind")

                // NTP set the clock right: by the wall clock the bundle is 10 days old, past the
                // 6-day max age, though it was first seen seconds ago on this boot. (Its retry, due
                // a minute after the clock behind, is long due.)
                let (again, againOutput) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, environment: setRight)
                #expect(again == 0, "\(againOutput)")
                #expect(againOutput.contains("1 deferred"), "\(againOutput)")
                #expect(try spool.names(.failed).isEmpty, "gave up on a bundle first seen seconds ago: \(againOutput)")
                let state = try #require(try CheckpointStore(spool: spool).bundleState(name: name))
                #expect(state.attempts == 2)
                #expect(
                    state.firstSeen.timeIntervalSinceNow > -300, "dated again by the boot's clock: \(state.firstSeen)")

                try await server.putJSON("/admin/faults", ["rateLimitRate": 0])
                let due = try await runBuilt("dopesync", ["requeue", name, "--spool", spool.root])
                #expect(due.status == 0, "\(due.stderr)")
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == 0, "\(output)")
                try await expectAllSyncedOnce([sample], spool: spool, server: server)
            }
        }
    }

    @Test(
        "a success stamped while the clock was a year ahead does not stand as the last success once it is set right (the no-recent-success alert can fire), nor as status's last run"
    )
    func aSuccessFromAClockAheadIsNotTheLastSuccess() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 9_885)])
            let metrics = directory.appendingPathComponent("dopesync.prom").path
            let aYearAhead = try await ClockAhead(in: directory, by: .seconds(365 * 86_400)).environment
            /// The last success the metrics file gives, in seconds from now.
            func lastSuccessFromNow() throws -> Double? {
                let prefix = "dopesync_last_success_timestamp_seconds "
                let text = try String(contentsOfFile: metrics, encoding: .utf8)
                let line = text.split(separator: "\n").first { $0.hasPrefix(prefix) }
                return line.flatMap { Double($0.dropFirst(prefix.count)) }.map { $0 - Date().timeIntervalSince1970 }
            }
            try await withDevServer { server in
                let (ahead, aheadOutput) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, ["--metrics-file", metrics],
                    environment: aYearAhead)
                #expect(ahead == 0, "\(aheadOutput)")
                #expect(try lastSuccessFromNow() ?? 0 > 360 * 86_400, "the success, stamped a year ahead")

                // The clock set right. A run its settings refuse carries the file's last success
                // over; one whose token the API refuses reads it from the store. Neither may say
                // the last success is a year away: "no success for 6 hours" would stay silent.
                let (refused, refusedOutput) = try await runToEnd(
                    spool, apiURL: "http://api.example", token: server.token, ["--metrics-file", metrics])
                #expect(refused == 78, "\(refusedOutput)")
                #expect(try lastSuccessFromNow() ?? 1 <= 0, "settings refused")
                let (denied, deniedOutput) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: "not-the-token", ["--metrics-file", metrics])
                #expect(denied == 77, "\(deniedOutput)")
                #expect(try lastSuccessFromNow() ?? 1 <= 0, "token refused")
                // The last run status shows is the one just made, not the one a year ahead.
                let shown = try await runBuilt("dopesync", ["status", "--spool", spool.root])
                let lastRun = shown.stdout.split(separator: "\n").first { $0.hasPrefix("last run ") }
                #expect(lastRun?.hasSuffix("exit 77") == true, "\(shown.stdout)")
            }
        }
    }

    @Test(
        "bundles done while the clock was a year ahead are kept for prune's older-than from when it finds them, then pruned, not kept a year longer"
    )
    func bundlesDoneUnderAClockAheadArePrunedInTime() async throws {
        try await withTemporaryDirectory { directory in
            let (spool, _) = try await Self.spoolWrittenAnHourAgo(
                in: directory, [SampleSession(seed: 9_890), SampleSession(seed: 9_891)])
            try await withDevServer { server in
                let aYearAhead = try await ClockAhead(in: directory, by: .seconds(365 * 86_400)).environment
                let (ahead, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, environment: aYearAhead)
                #expect(ahead == 0, "\(output)")
            }
            #expect(try spool.names(.done).count == 2)
            // A run below the free-space floor says what those bundles hold and why prune frees none yet.
            try await withDevServer { server in
                let (full, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, ["--min-free-space", "100%"])
                #expect(full == 73, "\(output)")
                #expect(output.contains("in 2 bundles recorded done ahead of this clock"), "\(output)")
            }
            let prune = ["prune", "--older-than", "30d", "--spool", spool.root]
            // A clock the kernel does not call synchronized may be the one that is behind: the
            // times are left, and prune says why.
            let unsynchronized = try await runBuilt(
                "dopesync", prune,
                environment: try await ClockAhead(in: directory, by: .zero, synchronized: false).environment)
            #expect(unsynchronized.status == 0, "\(unsynchronized.stderr)")
            #expect(
                unsynchronized.stdout.contains(
                    "2 bundles were recorded done ahead of this clock, which is not synchronized"),
                "\(unsynchronized.stdout)")
            // Synchronized (NTP): they count as done now, and are kept 30 days from now.
            let synchronizedNow = try await runBuilt(
                "dopesync", prune,
                environment: try await ClockAhead(in: directory, by: .zero, synchronized: true).environment)
            #expect(synchronizedNow.status == 0, "\(synchronizedNow.stderr)")
            #expect(
                synchronizedNow.stdout.contains(
                    "2 bundles were recorded done ahead of this clock (it has gone back since)"),
                "\(synchronizedNow.stdout)")
            #expect(try spool.names(.done).count == 2, "kept for 30 days from now")
            // 31 days on: both are pruned.
            let later = try await runBuilt(
                "dopesync", prune,
                environment: try await ClockAhead(in: directory, by: .seconds(31 * 86_400), synchronized: true)
                    .environment)
            #expect(later.status == 0, "\(later.stderr)")
            #expect(try spool.names(.done).isEmpty, "\(later.stdout)")
        }
    }

    @Test(
        "check says whether NTP keeps the clock, and when a sandbox refuses to say (adjtimex denied), never failing for it"
    )
    func checkSaysWhetherTheClockIsSynchronized() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [])
            try await withDevServer { server in
                for (state, words) in [
                    (Optional(true), "ok   clock: synchronized (NTP)"),
                    (false, "ok   clock: not synchronized (no NTP daemon keeps it, or not yet)"),
                    (nil, "ok   clock: cannot tell whether NTP keeps it (adjtimex: Operation not permitted"),
                ] {
                    var environment = try await ClockAhead(in: directory, by: .zero, synchronized: state).environment
                    if state == nil { environment["CLOCK_SYNCHRONIZED"] = "denied" }
                    environment["DOPESYNC_API_TOKEN"] = server.token
                    environment["DOPESYNC_MIN_FREE_SPACE"] = "0"
                    let checked = try await runBuilt(
                        "dopesync", ["check", "--spool", spool.root, "--api", server.baseURL],
                        environment: environment)
                    #expect(checked.status == 0, "\(checked.stdout)\(checked.stderr)")
                    #expect(checked.stdout.contains(words), "\(checked.stdout)")
                }
            }
        }
    }
}
