import DopeSyncTestSupport
import Foundation
import Testing

/// `make test` runs each `swift test` through `Scripts/test-deadline.sh`: a run that hangs fails
/// with what it was doing, not silently at CI's own limit; a run that ends keeps its exit status,
/// whatever it leaves behind; and the console shows what failed, not a line per test that passed.
@Suite(.timeLimit(minutes: 1)) struct TestDeadlineScriptTests {
    static let script = packageRoot() + "/Scripts/test-deadline.sh"

    /// Runs the script over `bash -c command` with `seconds` as its deadline; `$0` in the command
    /// is `argument`.
    static func deadline(
        _ seconds: Int, _ command: String, _ argument: String, in directory: URL,
        environment: [String: String] = [:]
    ) async throws -> ProcessOutput {
        try await runProcess(
            "/bin/bash",
            [
                script, "\(seconds)", directory.appendingPathComponent("tests.log").path, "/bin/bash", "-c", command,
                argument,
            ],
            environment: environment, allowFailure: true)
    }

    /// The pid a command wrote into `path`.
    static func pid(in path: String) throws -> pid_t {
        try #require(
            pid_t(String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
    }

    @Test("past its deadline: exit 124, the test still running and the stuck process named, the run ended")
    func aHungRunFailsWithWhatItWasDoing() async throws {
        try await withTemporaryDirectory { directory in
            let pidFile = directory.appendingPathComponent("stuck.pid").path
            let run = try await Self.deadline(
                2, #"echo '◇ Test "a test that hangs" started.'; sleep 301 & echo $! > "$0"; wait"#, pidFile,
                in: directory)
            #expect(run.status == 124, "\(run.stderr)")
            #expect(run.stderr.contains("tests started and not ended:\n  \"a test that hangs\"\n"), "\(run.stderr)")
            #expect(run.stderr.contains(" sleep 301"), "the stuck process listed: \(run.stderr)")
            // Gone, or its pid another process's by now (pid_max may be 32768): not that sleep.
            let stuck = try Self.pid(in: pidFile)
            let command = (try? String(contentsOfFile: "/proc/\(stuck)/cmdline", encoding: .utf8)) ?? ""
            #expect(!command.contains("301"), "the stuck process was ended with the run")
        }
    }

    @Test(
        "a run that passes but leaves a process holding its output ends with its own status, once the wait for it is over"
    )
    func aLeftoverHoldingTheOutputDoesNotHoldTheRun() async throws {
        try await withTemporaryDirectory { directory in
            let pidFile = directory.appendingPathComponent("leftover.pid").path
            // Started in a subshell of its own, so no longer under the run once that ends.
            let run = try await Self.deadline(
                60,
                #"echo '✔ Test run with 1 test in 1 suite passed after 0.1 seconds.'; (sleep 302 & echo $! > "$0"); exit 0"#,
                pidFile, in: directory, environment: ["DRAIN": "1"])
            defer { _ = try? kill(Self.pid(in: pidFile), SIGKILL) }
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout.contains("Test run with 1 test"), "\(run.stdout)")
            #expect(run.stderr.contains("processes it left held its output open 1 s longer"), "\(run.stderr)")
        }
    }

    @Test("a run's exit status is the script's; the console shows issues and the summary, the log every line")
    func statusAndConsole() async throws {
        try await withTemporaryDirectory { directory in
            let lines = [
                "◇ Test passes() started.", "✔ Test passes() passed after 0.001 seconds.",
                "◇ Test fails() started.", "✘ Test fails() recorded an issue at A.swift:3:5: Expectation failed",
                "✘ Test fails() failed after 0.002 seconds with 1 issue.",
                "✘ Test run with 2 tests failed after 0.003 seconds with 1 issue.",
            ]
            try lines.joined(separator: "\n").appending("\n").write(
                to: directory.appendingPathComponent("output"), atomically: true, encoding: .utf8)
            let printed = try await Self.deadline(
                60, #"cat "$0"; exit 7"#, directory.appendingPathComponent("output").path, in: directory)
            #expect(printed.status == 7, "\(printed.stderr)")
            #expect(
                printed.stdout.split(separator: "\n")
                    == lines.filter { !$0.hasPrefix("◇") && !$0.hasPrefix("✔") }.map { Substring($0) })
            let log = try String(contentsOf: directory.appendingPathComponent("tests.log"), encoding: .utf8)
            #expect(log == lines.joined(separator: "\n") + "\n")
        }
    }
}
