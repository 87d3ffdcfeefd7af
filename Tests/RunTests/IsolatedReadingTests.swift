import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// ``IsolatedReading`` with a shell script in the place of `dopesync inspect` (it gets `inspect
/// BUNDLE` as `$1 $2`): each way the child can end, and what it is given.
@Suite struct IsolatedReadingTests {
    let folder: TemporaryFolder

    init() throws { folder = try TemporaryFolder("isolated-reading") }

    /// A reader that runs `script` (a shell script's lines).
    func reader(_ script: String) throws -> IsolatedReading {
        let path = folder.sub("reader.sh")
        try #require(
            FileManager.default.createFile(
                atPath: path, contents: Data("#!/bin/sh\n\(script)\n".utf8), attributes: [.posixPermissions: 0o755]),
            "cannot write \(path)")
        return IsolatedReading(executable: path)
    }

    /// A time far above what a reader here takes: each of swift-subprocess's runs ends through a
    /// task of Swift's global executor, here the cooperative pool's two threads, which other suites
    /// fill for tens of seconds making sample bundles.
    func read(_ script: String, time: Duration = .seconds(120), stop: StopRequest = StopRequest()) async throws
        -> IsolatedReading.Outcome
    {
        let (reading, bundle) = (try reader(script), folder.sub("bundle.tar.gz"))
        // On NIO's loops, as in `dopesync run`.
        return await withTaskExecutorPreference(UploadExecutor.loops) {
            await reading.read(bundle, time: time, stop: stop, logger: quietLogger)
        }
    }

    @Test("the reader gets no environment, /dev/null for its input and output, and its bundle")
    func theReaderGetsNothingOfTheWorkers() async throws {
        // The shell's own input and output, read before its redirection into the file.
        let script = #"""
            streams="$(readlink /proc/$$/fd/0) $(readlink /proc/$$/fd/1)"
            { env; echo "args $1 $2"; echo "$streams"; } > "$2.seen"; exit 65
            """#
        #expect(try await read(script) == .survived(exitStatus: 65))
        let seen = try String(contentsOfFile: folder.sub("bundle.tar.gz.seen"), encoding: .utf8)
        let lines = seen.split(separator: "\n").map(String.init)
        // The shell sets PWD (and dash nothing more) by itself; nothing comes from this process.
        #expect(lines.filter { $0.contains("=") && !$0.hasPrefix("PWD=") }.isEmpty, "\(lines)")
        #expect(lines.contains("args inspect \(folder.sub("bundle.tar.gz"))"))
        #expect(lines.last == "/dev/null /dev/null", "\(lines)")
    }

    @Test("a reader killed by a signal says which")
    func killed() async throws {
        // The outcome named, if it is another (once under a loaded machine, not seen).
        let outcome = try await read("kill -SEGV $$")
        #expect(outcome == .killed(signal: SIGSEGV))
    }

    @Test("a reader past its time is ended (SIGTERM) and the reading timed out")
    func timedOut() async throws {
        // `sleep` ends at SIGTERM; `exec`: no shell left to outlive it. (No bound on the time it takes:
        // swift-subprocess's teardown runs on Swift's global executor, here the cooperative pool,
        // which other suites fill for seconds at a time.)
        #expect(try await read("exec sleep 30", time: .milliseconds(300)) == .timedOut)
    }

    @Test("a stop of the run ends the reader, however long its time")
    func stopped() async throws {
        let stop = StopRequest()
        // The reader says it has started on a FIFO, so the stop comes while it runs.
        let started = folder.sub("started")
        #expect(mkfifo(started, 0o600) == 0)
        let (reading, bundle) = (try reader("echo started > \(started); exec sleep 30"), folder.sub("bundle.tar.gz"))
        async let outcome = withTaskExecutorPreference(UploadExecutor.loops) {
            await reading.read(bundle, time: .seconds(120), stop: stop, logger: quietLogger)
        }
        let said = await onOwnThread { FileHandle(forReadingAtPath: started)?.readLine() }
        #expect(said == "started")
        stop.request()
        #expect(await outcome == .stopped)
    }

    @Test("a reader that cannot be started says why")
    func notStarted() async {
        let reading = IsolatedReading(executable: folder.sub("missing"))
        let outcome = await reading.read(
            folder.sub("bundle.tar.gz"), time: .seconds(1), stop: StopRequest(), logger: quietLogger)
        guard case .notStarted = outcome else {
            Issue.record("a missing reader: \(outcome)")
            return
        }
    }
}
