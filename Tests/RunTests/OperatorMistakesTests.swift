import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The ordinary mistakes of an operator: a mistyped spool, a run as root, an outage that outlasts
/// the retries, a timer's idle runs. Each costs nothing and says what happened.
@Suite struct OperatorMistakesTests {
    @Test("run on a spool that does not exist exits 73 naming the path, and creates nothing; --create-spool makes it")
    func missingSpoolIsAnError() async throws {
        try await withTemporaryDirectory { directory in
            let typo = Spool(root: directory.appendingPathComponent("spoool").path)
            let metrics = directory.appendingPathComponent("dopesync.prom").path
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    typo, apiURL: server.baseURL, token: server.token, ["--metrics-file", metrics])
                #expect(status == 73, "\(output)")
                #expect(output.contains(typo.root) && output.contains("does not exist"), "\(output)")
                #expect(!FileManager.default.fileExists(atPath: typo.root))
                // The metrics file says so, instead of still showing the run before.
                let text = try String(contentsOfFile: metrics, encoding: .utf8)
                #expect(text.contains("dopesync_last_run_exit_code 73"), "\(text)")
                // status on the same typo says what to check, not a listing's errno alone.
                let report = try await runBuilt("dopesync", ["status", "--spool", typo.root])
                #expect(report.status == 73, "\(report.stderr)")
                #expect(report.stderr.contains("no spool at \(typo.root): check --spool"), "\(report.stderr)")

                let (created, _) = try await runToEnd(
                    typo, apiURL: server.baseURL, token: server.token, ["--create-spool"])
                #expect(created == 0)
                #expect(try typo.names(.incoming).isEmpty)
            }
        }
    }

    @Test(
        "root on a spool another user owns is refused, with the runuser line to use, and writes nothing, metrics included",
        .enabled(if: geteuid() == 0, "needs root"))
    func rootOnAnotherUsersSpoolIsRefused() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 2700)])
            #expect(chown(spool.root, 65534, 65534) == 0)
            let metrics = spool.root + "/dopesync.prom"
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, ["--metrics-file", metrics])
                #expect(status == 73, "\(output)")
                #expect(output.contains("runuser -u nobody -- dopesync"), "\(output)")
                #expect(!FileManager.default.fileExists(atPath: spool.databasePath), "root made the database")
                #expect(!FileManager.default.fileExists(atPath: metrics), "root made the metrics file")
                #expect(try spool.names(.incoming).count == 1)

                let (allowed, _) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, ["--allow-root"])
                #expect(allowed == 0)
                #expect(try spool.names(.done).count == 1)
            }
        }
    }

    @Test(
        "a command run by someone other than the worker makes no lock file of its own in the spool, which would keep the worker's migrate out",
        .enabled(if: geteuid() == 0, "needs root to make users"))
    func commandsOfOthersMakeNoLockFile() async throws {
        let suffix = UUID().uuidString.prefix(8).lowercased()
        let (worker, someoneElse) = ("dopesync-t-lockw-\(suffix)", "dopesync-t-locko-\(suffix)")
        try await SessionOwnershipTests.withProducers([worker, someoneElse]) { uids in
            try await withTemporaryDirectory { directory in
                let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 9_870)])
                #expect(spool.give(to: uids[0], opening: directory))
                // Open to others, as a group-writable spool is to its group.
                #expect(chmod(spool.root, 0o777) == 0)
                let lockFile = spool.root + "/.dopesync.store.lock"
                let prune = ["prune", "--older-than", "30d", "--spool", spool.root]
                let byOther = try await runDopesync(as: someoneElse, prune, token: "unused")
                let byRoot = try await runProcess(builtProduct("dopesync").path, prune, allowFailure: true)
                #expect(byOther.status == 0 && byRoot.status == 0, "\(byOther.stderr) \(byRoot.stderr)")
                #expect(!FileManager.default.fileExists(atPath: lockFile), "another user's prune, or root's")
                // The worker's own makes it, the worker's; anybody's takes it from then on.
                let byWorker = try await runDopesync(as: worker, prune, token: "unused")
                #expect(byWorker.status == 0, "\(byWorker.stderr)")
                var info = stat()
                #expect(stat(lockFile, &info) == 0 && info.st_uid == uids[0])
            }
        }
    }

    @Test("a bundle out of attempts fails as gave_up, with the last error beside it")
    func outOfAttemptsSaysGaveUp() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 2710)])
            var configuration = DevServerConfiguration()
            configuration.faults.failRate = 1
            try await withDevServer(configuration) { server in
                var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                options.minAge = .zero
                options.retry.base = .milliseconds(1)
                options.retry.cap = .milliseconds(2)
                options.deferral = DeferralPolicy(maxAttempts: 1, maxAge: nil)
                let (summary, status) = await Worker(options: options, logger: quietLogger).run()
                #expect(status == .bundlesFailed && summary.failed == 1)
                let name = try #require(try spool.names(.failed).first { !$0.hasSuffix(".error") })
                let sidecar = try #require(ErrorSidecar.read(from: spool.sidecarPath(forFailed: name)))
                #expect(sidecar.reason.rawValue == "gave_up", "\(sidecar)")
                #expect(sidecar.message?.contains("gave up after 1 attempts") == true, "\(sidecar)")
                #expect(sidecar.message?.contains("the last error: http_50") == true, "\(sidecar)")
                #expect(sidecar.step == "session" && sidecar.httpStatus.map { $0 >= 500 } == true)
            }
        }
    }

    @Test("an idle run logs one line, the summary naming the API; --log-level warning keeps info lines out")
    func idleRunSaysOneLine() async throws {
        try await withTemporarySpool { spool, _ in
            try await withDevServer { server in
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == 0)
                let lines = output.split(separator: "\n")
                #expect(lines.count == 1, "\(output)")
                #expect(lines.first?.hasPrefix("run finished: 0 claimed") == true)
                #expect(output.contains("api \(server.baseURL)"), "\(output)")
            }
            let sample = SampleSession(seed: 2720)
            try pack(sample, into: spool, scratch: URL(fileURLWithPath: spool.root))
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, ["--log-level", "warning"])
                #expect(status == 0)
                #expect(!output.contains(" info "), "\(output)")
                #expect(try spool.names(.done).count == 1)
            }
        }
    }

    @Test(
        "check: a good configuration 0, a wrong token 77, a wrong URL 78, a dead API 75, a missing spool 73; one line each"
    )
    func checkCommand() async throws {
        try await withTemporarySpool { spool, directory in
            try await withDevServer { server in
                // Off the cooperative pool: this process's dev server must go on answering meanwhile.
                func check(_ url: String, token: String? = nil, root: String? = nil) async throws -> ProcessOutput {
                    try await runBuilt(
                        "dopesync", ["check", "--spool", root ?? spool.root, "--api", url],
                        environment: ["DOPESYNC_API_TOKEN": token ?? server.token, "PATH": "/usr/bin:/bin"])
                }
                let good = try await check(server.baseURL)
                #expect(good.status == 0, "\(good.stdout)")
                #expect(good.stdout.split(separator: "\n").allSatisfy { $0.hasPrefix("ok ") }, "\(good.stdout)")
                #expect(good.stdout.contains("ok   token: accepted"), "\(good.stdout)")
                #expect(!good.stdout.contains(server.token))

                let wrongToken = try await check(server.baseURL, token: "not-the-token")
                #expect(wrongToken.status == 77 && wrongToken.stdout.contains("FAIL token"), "\(wrongToken.stdout)")

                let wrongURL = try await check(server.baseURL + "/api")
                #expect(wrongURL.status == 78 && wrongURL.stdout.contains("FAIL api"), "\(wrongURL.stdout)")

                let missing = try await check(server.baseURL, root: directory.appendingPathComponent("nope").path)
                #expect(missing.status == 73 && missing.stdout.contains("does not exist"), "\(missing.stdout)")
                #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("nope").path))
            }
            let dead = try await withRefusingPort { url in
                try await runBuilt(
                    "dopesync", ["check", "--spool", spool.root, "--api", url], environment: ["DOPESYNC_API_TOKEN": "t"]
                )
            }
            #expect(dead.status == 75 && dead.stdout.contains("connection refused"), "\(dead.stdout)")
        }
    }

    @Test("an idle run still checks the API: a refused token is 77 and a dead API 75, not a quiet 0")
    func idleRunChecksTheAPI() async throws {
        try await withTemporarySpool { spool, directory in
            let metrics = directory.appendingPathComponent("dopesync.prom").path
            try await withDevServer { server in
                let (refused, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: "wrong", ["--metrics-file", metrics])
                #expect(refused == 77, "\(output)")
                let text = try String(contentsOfFile: metrics, encoding: .utf8)
                #expect(text.contains("dopesync_last_success_timestamp_seconds 0"), "\(text)")
            }
            let (dead, output) = try await withRefusingPort { url in try await runToEnd(spool, apiURL: url, token: "t")
            }
            #expect(dead == 75, "\(output)")
        }
    }

    @Test("status --runs N lists the last runs from the store, newest first, with their exit codes")
    func statusListsRuns() async throws {
        try await withTemporarySpool { spool, _ in
            try await withDevServer { server in
                let good = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                let refused = try await runToEnd(spool, apiURL: server.baseURL, token: "wrong")
                #expect(good.status == 0 && refused.status == 77)
            }
            let report = try await runBuilt("dopesync", ["status", "--spool", spool.root, "--runs", "5"])
            #expect(report.status == 0)
            let runs = report.stdout.split(separator: "\n").filter { $0.contains(" pid ") && $0.contains("exit ") }
            #expect(runs.count == 2, "\(report.stdout)")
            #expect(
                runs.first?.contains("exit 77") == true && runs.last?.contains("exit 0") == true, "\(report.stdout)")
        }
    }

    @Test("a spool reached through a symlinked folder works; its database file itself may not be a link")
    func spoolThroughASymlink() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 2730)])
            let link = directory.appendingPathComponent("spool-link").path
            #expect(symlink(spool.root, link) == 0)
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    Spool(root: link), apiURL: server.baseURL, token: server.token)
                #expect(status == 0, "\(output)")
                #expect(try spool.names(.done).count == 1)
            }
        }
    }

    @Test(
        "below the free-space floor a run claims nothing and exits 73, saying what is free and what prune would free; status warns"
    )
    func freeSpaceFloor() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 2740)])
            let metrics = directory.appendingPathComponent("dopesync.prom").path
            // A floor no file system meets: the whole of it free.
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token,
                    ["--min-free-space", "100%", "--metrics-file", metrics])
                #expect(status == 73, "\(output)")
                #expect(output.contains("below its free-space floor") && output.contains("free="), "\(output)")
                #expect(output.contains("prune.frees=") && output.contains("(done over 30d 0h ago)"), "\(output)")
                #expect(output.contains("run finished: 0 claimed"), "\(output)")
                #expect(try spool.names(.incoming).count == 1)
                let text = try String(contentsOfFile: metrics, encoding: .utf8)
                #expect(text.contains("dopesync_last_run_exit_code 73") && text.contains("dopesync_spool_free_bytes "))
                #expect(try await server.requestLog().filter { $0.path.hasPrefix("/api/") }.isEmpty)
            }
            let job = directory.appendingPathComponent("floor.yaml").path
            try Data("spool: \(spool.root)\nmin-free-space: 100%\n".utf8).write(to: URL(fileURLWithPath: job))
            let report = try await runBuilt("dopesync", ["status", "--job", job])
            #expect(report.stdout.contains("BELOW THE FLOOR"), "\(report.stdout)")
            let normal = try await runBuilt("dopesync", ["status", "--spool", spool.root])
            #expect(normal.stdout.contains("free space ") && !normal.stdout.contains("BELOW"), "\(normal.stdout)")
        }
    }

    @Test("--max-bundles holds with many slots claiming at once: exactly that many are claimed")
    func maxBundlesWithParallelSlots() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...12).map { SampleSession(seed: UInt64(2750 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            try await withDevServer { server in
                for _ in 1...3 {
                    var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                    options.minAge = .zero
                    options.concurrency = 8
                    options.maxBundles = 3
                    let (summary, status) = await Worker(options: options, logger: quietLogger).run()
                    #expect(status == .success)
                    #expect(summary.claimed == 3 && summary.done == 3, "\(summary.line)")
                }
                let (done, left) = (try spool.names(.done), try spool.names(.incoming))
                #expect(done.count == 9 && left.count == 3)
            }
        }
    }
}
