import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// ``TokenCommand``: a real `/bin/sh` in a process group of its own, each way a command can end.
@Suite struct TokenCommandTests {
    /// The command's token, or the message of its error; on NIO's loops, as in `dopesync run`.
    /// A time limit far above what a command here takes: each of swift-subprocess's runs ends
    /// through a task of Swift's global executor, which in `dopesync run` is NIO's loops, but here
    /// the cooperative pool's two threads, which other suites fill for tens of seconds making
    /// sample bundles.
    static func outcome(_ command: String, seconds: Int = 120) async -> Result<String, TokenCommandError> {
        await withTaskExecutorPreference(UploadExecutor.loops) {
            do throws(TokenCommandError) {
                return .success(try await TokenCommand(command: command, seconds: seconds).run())
            } catch {
                return .failure(error)
            }
        }
    }

    @Test("the first line is the token, trimmed, with or without its line break; the rest is not read")
    func firstLine() async throws {
        #expect(try await Self.outcome("echo ' tok-1 '; echo second").get() == "tok-1")
        #expect(try await Self.outcome("printf tok-2").get() == "tok-2")
        #expect(try await Self.outcome("printf 'tok-3\\r\\n'").get() == "tok-3", "a CRLF line end")
    }

    @Test("a command that prints no token says why, naming the command: no output, its exit status, its signal")
    func noToken() async {
        let cases = [
            ("true", "the token command `true` printed no token"),
            ("echo; exit 0", "the token command `echo; exit 0` printed no token"),
            ("exit 3", "the token command `exit 3` failed (exit 3); its messages are above"),
            ("kill -9 $$", "the token command `kill -9 $$` was killed by signal 9; its messages are above"),
        ]
        for (command, message) in cases {
            let outcome = await Self.outcome(command)
            guard case .failure(let error) = outcome else {
                Issue.record("\(command) gave a token")
                continue
            }
            #expect(error.message == message)
        }
    }

    @Test("what a command leaves running in the background is ended once its token is read")
    func backgroundHelperIsEnded() async throws {
        let helper = "sleep 217.25"  // a command line no other test runs
        // The token comes from the helper, once the shell has ended: only the group
        // still reaches it. (Its standard error is not this runner's: left running by a regression,
        // it would hold swift-test's pipe open, and the suite would wait for it.)
        let command = "(sleep 0.2; echo tok-4; exec \(helper) 2>/dev/null) &"
        #expect(try await Self.outcome(command).get() == "tok-4")
        let left = try await runProcess("pgrep", ["-f", "^\(helper)$"], allowFailure: true)
        #expect(left.status == 1, "still running: \(left.stdout)")
    }

    @Test("a command that outlives its time is ended, with what it started, and named")
    func timesOut() async throws {
        let helper = "sleep 217.5"  // a command line no other test runs
        // `exec`, and the helper's output elsewhere: the shell itself sleeps on, holding the output.
        guard case .failure(let error) = await Self.outcome("\(helper) >/dev/null 2>&1 & exec sleep 30", seconds: 1)
        else {
            Issue.record("a sleeping command gave a token")
            return
        }
        #expect(
            error.message
                == "the token command `\(helper) >/dev/null 2>&1 & exec sleep 30` timed out after 1 s; its messages are above"
        )
        let left = try await runProcess("pgrep", ["-f", "^\(helper)$"], allowFailure: true)
        #expect(left.status == 1, "still running: \(left.stdout)")
    }

    @Test("a command that ignores SIGTERM is killed a grace after its time, with what it started")
    func ignoringTheEndIsKilled() async throws {
        let helper = "sleep 217.75"  // a command line no other test runs
        let started = ContinuousClock.now
        let command = "trap '' TERM; \(helper) >/dev/null 2>&1 & while :; do sleep 0.1; done"
        guard case .failure(let error) = await Self.outcome(command, seconds: 1) else {
            Issue.record("a sleeping command gave a token")
            return
        }
        #expect(error.message.hasSuffix("timed out after 1 s; its messages are above"))
        #expect(ContinuousClock.now - started >= .seconds(1) + TokenCommand.grace)
        let left = try await runProcess("pgrep", ["-f", "^\(helper)$"], allowFailure: true)
        #expect(left.status == 1, "still running: \(left.stdout)")
    }

    @Test("a token read before the time limit counts, though the command takes its grace to end after it")
    func aTokenInTimeCountsWhateverTheEnding() async throws {
        // The token at once, then SIGTERM ignored: the command ends only when killed, 3 s later,
        // past its 1 s limit. The limit is for the token, which came in time.
        let command = "trap '' TERM; echo tok-in-time; while :; do sleep 0.1; done"
        let outcome = await Self.outcome(command, seconds: 1)
        #expect(try outcome.get() == "tok-in-time")
    }

    @Test("a command runs under timeout(1) as well, set past the worker's own limit and grace")
    func aBackstopOutlastsTheWorkersLimit() {
        let backstop = TokenCommand.backstop(30)
        #expect(backstop == ["/usr/bin/timeout", "--kill-after=3s", "36s"])
    }

    @Test("a token an HTTP header cannot carry is refused, and not shown")
    func unusable() async {
        guard case .failure(let error) = await Self.outcome("printf 'ab\\001cd\\n'") else {
            Issue.record("a control character went into a token")
            return
        }
        #expect(error.message.contains("characters an HTTP header cannot carry"))
        #expect(!error.message.contains("ab\u{1}cd"))
    }

    @Test(
        "the token command gets PATH, HOME, the locale and the variables named, never the database password or a proxy's credentials"
    )
    func aTokenCommandGetsAMinimalEnvironment() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 3800)])
            let seen = directory.appendingPathComponent("env.txt").path
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: "",
                    environment: [
                        "DOPESYNC_API_TOKEN": "",
                        "DOPESYNC_TOKEN_COMMAND": "env > '\(seen)'; echo \(server.token)",
                        "DOPESYNC_TOKEN_COMMAND_ENVIRONMENT": "VAULT_ADDR, DOPESYNC_DATABASE_PASSWORD",
                        "VAULT_ADDR": "https://vault.example:8200",
                        "DOPESYNC_DATABASE_PASSWORD": "s3cret-db",
                        "DOPESYNC_PROXY": "none", "https_proxy": "http://user:pr0xy-pw@proxy.example:3128",
                        "LANG": "C.UTF-8",
                    ])
                #expect(status == 0, "\(output)")
            }
            let environment = try String(contentsOfFile: seen, encoding: .utf8)
            let names = Set(
                environment.split(separator: "\n").compactMap { $0.split(separator: "=").first.map(String.init) })
            #expect(names.contains("PATH") && names.contains("LANG"), "\(names.sorted())")
            #expect(environment.contains("VAULT_ADDR=https://vault.example:8200"), "a variable named is passed")
            #expect(!environment.contains("s3cret-db"), "the database password, even when named")
            #expect(!environment.contains("pr0xy-pw"), "a proxy's credentials")
            #expect(!names.contains { $0.hasPrefix("DOPESYNC_") }, "\(names.sorted())")
        }
    }
}
