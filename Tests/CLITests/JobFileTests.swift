import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// Job files (`--job`), environment overrides and command-line options: what wins, and what an
/// operator is told when a file is wrong. Real YAML files on disk, and the built binary for exit codes.
@Suite struct JobFileTests {
    static func write(_ text: String, to directory: URL, name: String = "job.yaml") throws -> String {
        let path = directory.appendingPathComponent(name).path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    static func tokenFile(in directory: URL, _ token: String = "s3cret-token", mode: Int = 0o600) throws -> String {
        let path = directory.appendingPathComponent("token").path
        try (token + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
        return path
    }

    /// Expects `resolve` to fail; returns the error.
    static func failure(
        commandLine: [RunSetting: String] = [:], environment: [String: String] = [:], jobFile: String?
    ) -> ConfigurationError? {
        do {
            _ = try RunConfiguration.resolve(commandLine: commandLine, environment: environment, jobFile: jobFile)
            return nil
        } catch {
            return error
        }
    }

    @Test("a job file sets every run option; each value's source names the file and line")
    func everyKey() async throws {
        try await withTemporaryDirectory { directory in
            let token = try Self.tokenFile(in: directory)
            let job = try Self.write(
                """
                # a comment
                spool: /srv/spool
                api: https://api.example.test/v1
                token-file: \(token)
                concurrency: 8
                max-bundles: 250
                max-time: 4m
                min-age: 30s
                progress: never
                log-format: json
                metrics-file: \(directory.path)/dopesync.prom
                """, to: directory)
            let settings = try RunConfiguration.resolve(environment: [:], jobFile: job)
            #expect(settings.spool == "/srv/spool")
            #expect(settings.apiURL == "https://api.example.test/v1")
            #expect(settings.token == "s3cret-token")
            #expect(settings.concurrency == 8)
            #expect(settings.maxBundles == 250)
            #expect(settings.maxTime == .seconds(240))
            #expect(settings.minAge == .seconds(30))
            #expect(settings.progress == .never)
            #expect(settings.logFormat == .json)
            #expect(settings.metricsFile == "\(directory.path)/dopesync.prom")
            #expect(settings.sources["concurrency"] == .jobFile(path: job, line: 5))
            #expect(settings.sources["token"] == .jobFile(path: job, line: 4))
            #expect(settings.warnings.isEmpty)
            #expect(!settings.description.contains("s3cret"), "the settings' log line must not show the token")
            #expect(settings.description.contains("concurrency=8 (\(job):5)"), "\(settings)")
            #expect(settings.description.contains("token=<redacted> (\(job):4)"), "\(settings)")
        }
    }

    @Test("the command line beats the environment, which beats the job file, which beats the defaults")
    func precedence() async throws {
        try await withTemporaryDirectory { directory in
            let job = try Self.write(
                "spool: ./from-file\napi: https://file.test\nconcurrency: 2\nmin-age: 1m\nmax-bundles:\n", to: directory
            )
            let environment = [
                "DOPESYNC_API_URL": "https://environment.test", "DOPESYNC_CONCURRENCY": "3",
                "DOPESYNC_API_TOKEN": "from-environment",
                "DOPESYNC_MAX_TIME": "90s",
            ]
            let settings = try RunConfiguration.resolve(
                commandLine: [.concurrency: "5"], environment: environment, jobFile: job)
            #expect(settings.concurrency == 5)  // command line
            #expect(settings.sources["concurrency"] == .commandLine)
            #expect(settings.apiURL == "https://environment.test")  // environment over the file
            #expect(settings.sources["api"] == .environment(variable: "DOPESYNC_API_URL"))
            #expect(settings.maxTime == .seconds(90))
            #expect(settings.spool == "./from-file")  // file over the default
            #expect(settings.minAge == .seconds(60))
            #expect(settings.maxBundles == nil, "`max-bundles:` with no value means no limit")
            #expect(settings.progress == .auto)  // default
            #expect(settings.token == "from-environment")

            // --token-file on the command line beats DOPESYNC_API_TOKEN.
            let token = try Self.tokenFile(in: directory, "from-file")
            let explicit = try RunConfiguration.resolve(
                commandLine: [.tokenFile: token], environment: environment, jobFile: job)
            #expect(explicit.token == "from-file")
        }
    }

    @Test("an unknown key names the file, the line and the key, with a suggestion for a typo")
    func unknownKey() async throws {
        try await withTemporaryDirectory { directory in
            let job = try Self.write("spool: ./spool\napi: https://x.test\nconcurency: 8\n", to: directory)
            let error = try #require(Self.failure(environment: ["DOPESYNC_API_TOKEN": "t"], jobFile: job))
            #expect(error.code == .unknownKey)
            #expect(error.key == "concurency")
            #expect(error.source == .jobFile(path: job, line: 3))
            #expect("\(error)" == "\(job):3: concurency: unknown key (did you mean concurrency?) [unknown_key]")
            #expect(error.exitStatus == .configuration)
            #expect(JobFileKeys.editDistance("max-tim", "max-time") == 1 && JobFileKeys.editDistance("", "api") == 3)
            #expect(
                JobFileKeys.editDistance("spool", "spool") == 0 && JobFileKeys.editDistance("progres", "log-format") > 2
            )

            let far = try Self.write("colour: blue\n", to: directory, name: "far.yaml")
            let farError = try #require(Self.failure(jobFile: far))
            #expect("\(farError)".contains("known keys: spool, api, token-file"))

            let secret = try Self.write("token: abc\n", to: directory, name: "secret.yaml")
            let secretError = try #require(Self.failure(jobFile: secret))
            #expect(secretError.code == .unknownKey)
            #expect("\(secretError)".contains("never holds the token"))

            let password = try Self.write("database-password: hunter2\n", to: directory, name: "password.yaml")
            let passwordError = try #require(Self.failure(jobFile: password))
            #expect(passwordError.code == .unknownKey)
            #expect("\(passwordError)".contains("database-password-file:"), "\(passwordError)")
            #expect(!"\(passwordError)".contains("hunter2"), "the value is never repeated")
        }
    }

    @Test("wrong types and bad values name the key and where the value came from")
    func badValues() async throws {
        try await withTemporaryDirectory { directory in
            let cases: [(yaml: String, code: ConfigurationError.Code, key: String, says: String)] = [
                ("concurrency: four\n", .badValue, "concurrency", "\"four\" is not a whole number from 1 to 64"),
                ("concurrency: 0\n", .badValue, "concurrency", "from 1 to 64"),
                ("min-age: soon\n", .badValue, "min-age", "is not a duration"),
                ("max-bundles: -1\n", .badValue, "max-bundles", "0 or more"),
                ("progress: sometimes\n", .badValue, "progress", "auto, always or never"),
                ("api: localhost:8080\n", .badValue, "api", "is not an http:// or https:// URL"),
                ("spool: [a, b]\n", .wrongType, "spool", "not a list or a mapping"),
                ("spool:\n  path: /x\n", .wrongType, "spool", "not a list or a mapping"),
            ]
            for (index, example) in cases.enumerated() {
                let job = try Self.write(example.yaml, to: directory, name: "case\(index).yaml")
                let error = try #require(
                    Self.failure(environment: ["DOPESYNC_API_TOKEN": "t"], jobFile: job), "\(example.yaml)")
                #expect(error.code == example.code, "\(example.yaml)")
                #expect(error.key == example.key, "\(example.yaml)")
                #expect("\(error)".hasPrefix("\(job):1: \(example.key): "), "\(error)")
                #expect("\(error)".contains(example.says), "\(error)")
            }

            let fromEnvironment = try #require(
                Self.failure(environment: ["DOPESYNC_MAX_TIME": "ten minutes"], jobFile: nil))
            #expect(fromEnvironment.source == .environment(variable: "DOPESYNC_MAX_TIME"))
            #expect(
                "\(fromEnvironment)"
                    == "max-time: \"ten minutes\" is not a duration (e.g. 500ms, 30s, 10m, 1h, 2d) (from the environment variable DOPESYNC_MAX_TIME) [bad_value]"
            )
            #expect(fromEnvironment.exitStatus == .configuration)

            let typed = try #require(Self.failure(commandLine: [.minAge: "later"], jobFile: nil))
            #expect(typed.exitStatus == .usage)

            let notYAML = try Self.write("spool: [unclosed\n", to: directory, name: "broken.yaml")
            let parseError = try #require(Self.failure(jobFile: notYAML))
            #expect(parseError.code == .unreadableJobFile)
            #expect("\(parseError)".hasPrefix("\(notYAML): not valid YAML"))

            let missingFile = try #require(Self.failure(jobFile: directory.path + "/absent.yaml"))
            #expect(missingFile.code == .unreadableJobFile)
            #expect("\(missingFile)".contains("absent.yaml"))
        }
    }

    @Test("the API and the token are required for run, with a message saying where to give them")
    func requiredSettings() async throws {
        try await withTemporaryDirectory { directory in
            let noAPI = try #require(Self.failure(environment: ["DOPESYNC_API_TOKEN": "t"], jobFile: nil))
            #expect(noAPI.code == .missing && noAPI.key == "api")
            #expect("\(noAPI)".contains("--api, DOPESYNC_API_URL or `api:` in a job file"))

            let noToken = try #require(Self.failure(environment: ["DOPESYNC_API_URL": "https://x.test"], jobFile: nil))
            #expect(noToken.code == .missing && noToken.key == "token-file")

            let job = try Self.write("api: https://x.test\ntoken-file: \(directory.path)/absent\n", to: directory)
            let unreadable = try #require(Self.failure(jobFile: job))
            #expect(unreadable.code == .unreadableTokenFile)
            #expect(unreadable.source == .jobFile(path: job, line: 2))

            let empty = try Self.tokenFile(in: directory, "")
            let emptyError = try #require(
                Self.failure(
                    commandLine: [.tokenFile: empty], environment: ["DOPESYNC_API_URL": "https://x.test"], jobFile: nil)
            )
            #expect(emptyError.code == .unreadableTokenFile)
            #expect(
                emptyError.exitStatus == .configuration, "a token file is configuration, even when named by an option")

            // A token typed where the file's path belongs is never echoed.
            let mistake = try #require(
                Self.failure(
                    commandLine: [.tokenFile: "s3cretTokenValue"], environment: ["DOPESYNC_API_URL": "https://x.test"],
                    jobFile: nil))
            #expect(mistake.code == .unreadableTokenFile)
            #expect(!"\(mistake)".contains("s3cretTokenValue"), "\(mistake)")

            // An empty variable counts as not set.
            let unset = try #require(
                Self.failure(environment: ["DOPESYNC_API_URL": "", "DOPESYNC_API_TOKEN": "t"], jobFile: nil))
            #expect(unset.code == .missing && unset.key == "api")

            // status, requeue and prune need only the spool.
            let spoolOnly = try RunConfiguration.resolve(environment: [:], jobFile: nil, purpose: .spoolOnly)
            #expect(spoolOnly.spool == "./spool")
        }
    }

    @Test("a token file others can read is used, with a warning to chmod it")
    func readableTokenFileWarns() async throws {
        try await withTemporaryDirectory { directory in
            let token = try Self.tokenFile(in: directory, mode: 0o644)
            let settings = try RunConfiguration.resolve(
                commandLine: [.tokenFile: token, .api: "https://x.test"], environment: [:], jobFile: nil)
            #expect(settings.token == "s3cret-token")
            #expect(
                settings.warnings == ["the token file \(token) can be read by other users (mode 644); chmod 600 it"])
        }
    }

    @Test("the shipped job files are valid")
    func shippedJobFiles() async throws {
        let root = packageRoot()
        let local = try RunConfiguration.resolve(
            environment: ["DOPESYNC_API_TOKEN": "t"], jobFile: root + "/jobs/local.yaml")
        #expect(local.spool == "./spool" && local.apiURL == "http://127.0.0.1:8080")
        let production = try RunConfiguration.resolve(
            environment: ["DOPESYNC_API_TOKEN": "t"], jobFile: root + "/jobs/production.yaml")
        #expect(production.spool == "/var/spool/dopesync" && production.maxTime == .seconds(240))
        #expect(production.apiURL == "https://api.truedope.example")
    }

    @Test("dopesync run --job with a typo exits 78 naming the key and the file; a bad option exits 64")
    func exitCodesOfTheBinary() async throws {
        try await withTemporaryDirectory { directory in
            let job = try Self.write("api: http://127.0.0.1:9\nmax-tim: 5m\n", to: directory)
            let typo = try await runBuilt("dopesync", ["run", "--job", job], environment: ["DOPESYNC_API_TOKEN": "t"])
            #expect(typo.status == 78)
            #expect(
                typo.stderr.contains("\(job):2: max-tim: unknown key (did you mean max-time?) [unknown_key]"),
                "\(typo.stderr)")

            let status = try await runBuilt("dopesync", ["status", "--job", job])
            #expect(status.status == 78, "status refuses the same job file")

            let environment = try await runBuilt(
                "dopesync", ["run", "--api", "http://127.0.0.1:9"],
                environment: ["DOPESYNC_API_TOKEN": "t", "DOPESYNC_CONCURRENCY": "lots"])
            #expect(environment.status == 78)
            #expect(environment.stderr.contains("DOPESYNC_CONCURRENCY"))

            let option = try await runBuilt(
                "dopesync", ["run", "--api", "http://127.0.0.1:9", "--max-time", "forever"],
                environment: ["DOPESYNC_API_TOKEN": "t"])
            #expect(option.status == 64)
        }
    }

    @Test("a run from a job file syncs, never prints the token, and writes the metrics file")
    func runFromJobFile() async throws {
        try await withTemporarySpool { spool, directory in
            for seed in [701, 702] as [UInt64] { try pack(SampleSession(seed: seed), into: spool, scratch: directory) }
            try await withDevServer { server in
                let token = try Self.tokenFile(in: directory, server.token)
                let metrics = directory.appendingPathComponent("dopesync.prom").path
                let job = try Self.write(
                    """
                    spool: \(spool.root)
                    api: \(server.baseURL)
                    token-file: \(token)
                    min-age: 0
                    metrics-file: \(metrics)
                    """, to: directory)
                let result = try await runBuilt("dopesync", ["run", "--job", job])
                #expect(result.status == 0, "\(result.stderr)")
                #expect(result.stdout.contains("2 done"))
                #expect(!(result.stdout + result.stderr).contains(server.token), "the token must never be printed")

                let text = try String(contentsOfFile: metrics, encoding: .utf8)
                let samples = Dictionary(
                    text.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { line in
                        let parts = line.split(separator: " ")
                        return (String(parts[0]), Double(parts[1])!)
                    }, uniquingKeysWith: { $1 })
                #expect(samples["dopesync_last_run_bundles{outcome=\"done\"}"] == 2)
                #expect(samples["dopesync_last_run_bundles{outcome=\"failed\"}"] == 0)
                #expect(samples["dopesync_last_run_exit_code"] == 0)
                #expect(samples["dopesync_spool_bundles{folder=\"done\"}"] == 2)
                #expect(samples["dopesync_spool_bundles{folder=\"incoming\"}"] == 0)
                #expect((samples["dopesync_last_run_requests"] ?? 0) > 10)
                let lastSuccess = try #require(samples["dopesync_last_success_timestamp_seconds"])
                #expect(abs(lastSuccess - Date().timeIntervalSince1970) < 600)
                // Every sample has HELP and TYPE lines, and nothing but the .prom file is left in the folder.
                let histogram = "dopesync_bundle_sync_seconds"
                for name in Set(samples.keys.map { String($0.prefix { $0 != "{" }) }) where !name.hasPrefix(histogram) {
                    #expect(text.contains("# TYPE \(name) gauge"), "\(name)")
                }
                // The time from drop to done/ of the run's two bundles, as a histogram.
                #expect(text.contains("# TYPE \(histogram) histogram"))
                #expect(samples["\(histogram)_count"] == 2)
                #expect(samples["\(histogram)_bucket{le=\"+Inf\"}"] == 2)
                #expect(samples["\(histogram)_bucket{le=\"86400\"}"] == 2)
                // Both arrived moments before the run: the sum is their few seconds, not a day.
                let sum = try #require(samples["\(histogram)_sum"])
                #expect(sum > 0 && sum < 600, "\(sum)")
                let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter {
                    $0.contains(".prom")
                }
                #expect(leftovers == ["dopesync.prom"])

                // A later run whose token is refused: exit 77 in the file, the last success kept,
                // the new bundle back in incoming/ and counted in the backlog.
                try pack(SampleSession(seed: 703), into: spool, scratch: directory)
                let wrongToken = try Self.tokenFile(in: directory, "wrong")
                let refused = try await runBuilt("dopesync", ["run", "--job", job, "--token-file", wrongToken])
                #expect(refused.status == 77, "\(refused.stderr)")
                let after = try String(contentsOfFile: metrics, encoding: .utf8)
                #expect(after.contains("dopesync_last_run_exit_code 77\n"))
                #expect(after.contains("dopesync_last_success_timestamp_seconds \(RunMetrics.format(lastSuccess))\n"))
                #expect(after.contains("dopesync_spool_bundles{folder=\"incoming\"} 1\n"))

                // Runs the settings refuse before they begin: a typo in the job file (78), then a
                // token command that fails (77). Each says so in the file, the last success kept:
                // the 77 after the 78 is the failing command's own, not the refused token's above.
                let settings = try String(contentsOfFile: job, encoding: .utf8)
                let typo = try Self.write(settings + "\nconcurency: 4\n", to: directory, name: "typo.yaml")
                let mistaken = try await runBuilt("dopesync", ["run", "--job", typo])
                #expect(mistaken.status == 78, "\(mistaken.stderr)")
                #expect(
                    try String(contentsOfFile: metrics, encoding: .utf8).contains("dopesync_last_run_exit_code 78\n"))
                let withCommand = try Self.write(
                    settings.replacingOccurrences(of: "token-file: \(token)", with: "token-command: /bin/false"),
                    to: directory, name: "command.yaml")
                let failing = try await runBuilt("dopesync", ["run", "--job", withCommand])
                #expect(failing.status == 77, "\(failing.stderr)")
                let refusedBySettings = try String(contentsOfFile: metrics, encoding: .utf8)
                #expect(refusedBySettings.contains("dopesync_last_run_exit_code 77\n"), "\(refusedBySettings)")
                #expect(
                    refusedBySettings.contains(
                        "dopesync_last_success_timestamp_seconds \(RunMetrics.format(lastSuccess))\n"))
                #expect(refusedBySettings.contains("dopesync_spool_bundles{folder=\"incoming\"} 1\n"))
            }
        }
    }

    @Test("which runs count as healthy for dopesync_last_success_timestamp_seconds")
    func healthyRuns() {
        let idle = 0
        let backingOff = 3  // bundles waiting for retry after the run
        #expect(RunMetrics.isHealthy(RunSummary(claimed: 2, done: 2, exitCode: 0), waitingForRetry: idle))
        #expect(
            RunMetrics.isHealthy(RunSummary(claimed: 2, done: 1, failed: 1, exitCode: 1), waitingForRetry: idle),
            "a bad bundle is the data's fault")
        #expect(
            RunMetrics.isHealthy(RunSummary(exitCode: 0), waitingForRetry: idle), "nothing to do and nothing waiting")
        #expect(
            !RunMetrics.isHealthy(RunSummary(exitCode: 0), waitingForRetry: backingOff),
            "idle while bundles wait out an outage proves nothing")
        #expect(
            RunMetrics.isHealthy(RunSummary(exitCode: 0), waitingForRetry: backingOff, apiChecked: true),
            "idle, but its own look at the API passed: the waiting bundle is the API's refusal of it alone")
        #expect(
            !RunMetrics.isHealthy(
                RunSummary(claimed: 2, done: 1, deferred: 1, exitCode: 0), waitingForRetry: backingOff))
        #expect(!RunMetrics.isHealthy(RunSummary(claimed: 1, deferred: 1, exitCode: 75), waitingForRetry: backingOff))
        #expect(!RunMetrics.isHealthy(RunSummary(claimed: 1, exitCode: 77), waitingForRetry: idle))
    }
}

/// The checkout's root (the folder holding Package.swift), found from this file's path.
func packageRoot(file: String = #filePath) -> String {
    var url = URL(fileURLWithPath: file)
    while url.path != "/" {
        url.deleteLastPathComponent()
        if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) { return url.path }
    }
    return FileManager.default.currentDirectoryPath
}
