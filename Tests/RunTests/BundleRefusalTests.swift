import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// A 401 or 403 on one bundle's request, while the API takes the same token for others, is the
/// bundle's: a web application firewall that blocks its content must not stop the whole spool.
@Suite struct BundleRefusalTests {
    /// A dev server whose firewall refuses every body holding `<script>` (``blockedByAFirewall(seed:)``).
    static var firewalled: DevServerConfiguration {
        var configuration = DevServerConfiguration()
        configuration.forbiddenBodyPattern = "<script>"
        return configuration
    }

    /// A session whose notes the dev server's firewall (`forbiddenBodyPattern` `<script>`) refuses.
    static func blockedByAFirewall(seed: UInt64) -> SampleSession {
        var blocked = SampleSession(seed: seed)
        blocked.json["notes"] = "zero at 100 <script>alert(1)</script>"
        return blocked
    }

    /// A spool of a good bundle (`seed`) and then one the firewall blocks (`seed + 1`), which a
    /// run takes second: a run takes bundles as they arrived (ctime), and the rename that gives it
    /// the name `blocked.tar.gz` sets its ctime.
    static func goodThenBlocked(in directory: URL, seed: UInt64) async throws -> Spool {
        let blocked = blockedByAFirewall(seed: seed + 1)
        let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: seed), blocked])
        #expect(
            rename(spool.path(.incoming, "\(blocked.sessionID).tar.gz"), spool.path(.incoming, "blocked.tar.gz")) == 0)
        return spool
    }

    /// `dopesync run` in-process, a bundle failing after two counted attempts, each due at once.
    static func run(_ spool: Spool, _ server: RunningDevServer, concurrency: Int = 4) async -> (
        RunSummary, DopeSync.ExitStatus
    ) {
        var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
        options.minAge = .zero
        options.concurrency = concurrency
        options.retry.base = .milliseconds(1)
        options.retry.cap = .milliseconds(5)
        options.minFreeSpace = .bytes(0)
        options.deferral = DeferralPolicy(base: .milliseconds(1), cap: .milliseconds(1), maxAttempts: 2)
        return await Worker(options: options, logger: quietLogger).run()
    }

    @Test(
        "a firewall's 403 for one bundle among five: four reach done/, the fifth fails as http_403 after its attempts")
    func aBundleRefusedByAFirewallFailsAlone() async throws {
        try await withTemporaryDirectory { directory in
            let good = (1...4).map { SampleSession(seed: UInt64(3700 + $0)) }
            let blocked = Self.blockedByAFirewall(seed: 3705)
            let spool = try await makeSpool(in: directory, samples: good + [blocked])
            let blockedName = "\(blocked.sessionID).tar.gz"
            try await withDevServer(Self.firewalled) { server in
                let (first, firstStatus) = await Self.run(spool, server)
                #expect(firstStatus == .success && first.done == 4 && first.deferred == 1, "\(first)")
                #expect(first.givenBack == 0, "the token was not taken for refused: \(first)")
                let waiting = try spool.names(.incoming)
                #expect(waiting == [blockedName])

                let (second, secondStatus) = await Self.run(spool, server)
                #expect(secondStatus == .bundlesFailed && second.failed == 1, "\(second)")
                let sidecar = try #require(ErrorSidecar.read(from: spool.sidecarPath(forFailed: blockedName)))
                #expect(sidecar.reason == .http(403), "\(sidecar.reason)")
                #expect(sidecar.step == "session" && sidecar.httpStatus == 403)
                #expect(sidecar.message?.contains("the refusal is the bundle's") == true, "\(sidecar.message ?? "")")
                let done = try spool.names(.done)
                #expect(done.count == 4)
                let created = try await server.createdCounts()
                #expect(created["session"] == 4, "\(created)")
            }
        }
    }

    @Test(
        "an API with neither lookups nor lists, a firewall's 403 for one bundle after another went through with the token: the refusal is the bundle's, not exit 77"
    )
    func nothingToAskButTheRunsOwnCreates() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await Self.goodThenBlocked(in: directory, seed: 3720)
            var configuration = DevServerConfiguration.withoutReferenceLists
            configuration.lookups = false
            configuration.forbiddenBodyPattern = "<script>"
            try await withDevServer(configuration) { server async throws in
                let (summary, status) = await Self.run(spool, server, concurrency: 1)
                #expect(status == .success, "\(summary)")
                #expect(summary.done == 1 && summary.deferred == 1 && summary.givenBack == 0, "\(summary)")
                #expect(try spool.names(.incoming) == ["blocked.tar.gz"])
            }
        }
    }

    @Test(
        "a new bundle under the name of one that failed starts afresh: its first refusal defers it, it does not fail on the old bundle's attempts"
    )
    func aNewBundleUnderAFailedOnesNameStartsAfresh() async throws {
        try await withTemporaryDirectory { directory in
            let blocked = Self.blockedByAFirewall(seed: 3731)
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 3730), blocked])
            let name = "\(blocked.sessionID).tar.gz"  // as pack names it again
            var configuration = DevServerConfiguration()
            configuration.forbiddenBodyPattern = "<script>"
            try await withDevServer(configuration) { server async throws in
                // Two runs: deferred, then failed after its 2 attempts.
                _ = await Self.run(spool, server)
                let (second, _) = await Self.run(spool, server)
                #expect(try second.failed == 1 && spool.names(.failed).contains(name), "\(second)")
                // The producer packs the session again, under the same name, still blocked.
                #expect(try pack(blocked, into: spool, scratch: directory.appendingPathComponent("again")) == name)
                let (third, _) = await Self.run(spool, server)
                #expect(third.deferred == 1 && third.failed == 0, "its first attempt, not its third: \(third)")
                #expect(try spool.names(.incoming) == [name])
            }
        }
    }

    @Test("whose a refusal is, from the token's own check and the run's creates with the token")
    func whoseTheRefusalIs() {
        let cases: [(APIClient.TokenCheck, created: Bool, verdict: APIClient.TokenVerdict)] = [
            (.accepted, false, .bundles),
            (.refused, true, .token),
            // A 503 or a timeout says nothing of the token: neither the token's nor the bundle's.
            (.unanswered("HTTP 503: busy"), true, .undecided("HTTP 503: busy")),
            (.nothingToAsk, true, .bundles),
            (.nothingToAsk, false, .token),
        ]
        for (check, created, verdict) in cases {
            #expect(
                APIClient.verdict(check, tokenCreatedThisRun: created) == verdict,
                "\(check), created this run: \(created)")
        }
    }

    @Test("a token the API refuses everywhere still stops the run with 77, every bundle given back uncounted")
    func aTokenRefusedEverywhereStopsTheRun() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...3).map { SampleSession(seed: UInt64(3710 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            try await withDevServer { server in
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: "not-the-token")
                #expect(status == .permissionDenied, "\(summary)")
                #expect(summary.done == 0 && summary.deferred == 0 && summary.failed == 0, "\(summary)")
                let back = try spool.names(.incoming)
                #expect(back.count == samples.count)
            }
        }
    }

    @Test(
        "an idle run whose look at the API passes is a success, though a bundle the firewall refuses waits for retry: the no-recent-success alert does not blame the API"
    )
    func anIdleRunBesideARefusedBundleIsASuccess() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [Self.blockedByAFirewall(seed: 3720)])
            let metrics = directory.appendingPathComponent("dopesync.prom").path
            try await withDevServer(Self.firewalled) { server in
                var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                (options.minAge, options.minFreeSpace, options.metricsFile) = (.zero, .bytes(0), metrics)
                let (first, _) = await Worker(options: options, logger: quietLogger).run()
                #expect(first.deferred == 1, "\(first)")
                #expect(RunMetrics.lastSuccess(inFile: metrics) == nil, "a run that deferred is no success")
                // The next run finds the bundle waiting for retry, nothing due: it looks at the API.
                let (idle, idleStatus) = await Worker(options: options, logger: quietLogger).run()
                #expect(idleStatus == .success && idle.claimed == 0, "\(idle)")
                let lastSuccess = try #require(RunMetrics.lastSuccess(inFile: metrics))
                #expect(abs(lastSuccess.timeIntervalSinceNow) < 600)
                #expect(try spool.names(.incoming).count == 1, "still waiting for retry")
            }
        }
    }

    @Test(
        "an idle run beside a bundle deferred for the API's own 5xx is no success, though the API's health and the token check pass"
    )
    func anIdleRunBesideAnAPIOutageIsNoSuccess() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 3721)])
            let metrics = directory.appendingPathComponent("dopesync.prom").path
            var configuration = DevServerConfiguration()
            configuration.faults.failRate = 1  // every POST a 500 or 503; GETs answer
            try await withDevServer(configuration) { server in
                var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                (options.minAge, options.minFreeSpace, options.metricsFile) = (.zero, .bytes(0), metrics)
                (options.retry.base, options.retry.cap) = (.milliseconds(1), .milliseconds(5))
                let (first, _) = await Worker(options: options, logger: quietLogger).run()
                #expect(first.deferred == 1, "\(first)")
                let (idle, idleStatus) = await Worker(options: options, logger: quietLogger).run()
                #expect(idleStatus == .success && idle.claimed == 0, "the idle check passes: \(idle)")
                let written = try String(contentsOfFile: metrics, encoding: .utf8)
                // The first run claimed one: a file that says none is the idle run's.
                #expect(
                    written.contains("dopesync_last_run_exit_code 0\n")
                        && written.contains("dopesync_last_run_claimed_bundles 0\n"),
                    "the idle run wrote it: \(written)")
                #expect(RunMetrics.lastSuccess(inFile: metrics) == nil, "the API's writes fail: no success")
            }
        }
    }
}
