import Foundation
import NIOCore
import NIOPosix
import Subprocess
import Synchronization
import SystemPackage

#if canImport(Glibc)
    import Glibc
#endif

/// One run of a token command (`token-command`): `/bin/sh -c COMMAND`, started as every child of
/// the worker is (``ChildProcess``: descriptors 0 to 2 only, signals at their defaults), in a
/// process group of its own, with its output in a pipe of its own and its standard error on ours
/// (the log). A command that outlives its time is ended with what it started: the task running it
/// is cancelled, and swift-subprocess's teardown signals the whole group.
struct TokenCommand: Sendable {
    let command: String
    let seconds: Int
    /// The variables of the worker's environment the command gets besides ``minimalEnvironment``.
    var passing: [String] = []

    /// What every token command gets of the worker's environment: where to find programs, the
    /// user's home, the locale and time zone. Not the rest: the worker's holds the token, the
    /// database password and a proxy's credentials, which a command (or what it runs) could log.
    static let minimalEnvironment = ["PATH", "HOME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME"]

    /// Never passed, even when named: the secrets the worker itself holds.
    static let neverPassed: Set<String> = [
        RunSetting.tokenEnvironmentVariable, "DOPESYNC_DATABASE_PASSWORD", "DOPESYNC_DATABASE_URL", "DOPESYNC_PROXY",
        "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
    ]

    /// The command's environment: ``minimalEnvironment`` and the names in `passing`, as `environment`
    /// has them; `PATH` a plain system one where the worker has none.
    static func environment(passing: [String], from environment: [String: String]) -> [String: String] {
        var child: [String: String] = ["PATH": "/usr/local/bin:/usr/bin:/bin"]
        for name in minimalEnvironment + passing where !neverPassed.contains(name) {
            if let value = environment[name] { child[name] = value }
        }
        return child
    }

    private var shown: String { DisplayText.escaped(command) }

    /// How long the command, and what it started, have between SIGTERM and SIGKILL.
    static let grace = Duration.seconds(3)

    /// The first line of the command's output, trimmed; throws, naming the command, when it fails,
    /// times out or prints nothing. Once the line is read, the command and what it left running
    /// are told to end (SIGTERM), and killed ``grace`` later at most: what they still do is not
    /// the run's business.
    func run() async throws(TokenCommandError) -> String {
        let seconds = seconds
        let lineRead = LineRead()
        let ending = await withTaskGroup(of: Ending?.self) { group in
            group.addTask { await self.runToItsEnd(lineRead: lineRead.happened) }
            group.addTask {
                // The time limit: when it comes first, the command's task is cancelled, and the
                // command ended as ``runToItsEnd(lineRead:)`` says. A line already read stands it
                // down: the command is being ended, within its grace, and its token is good.
                guard (try? await sleepOnLoop(for: .seconds(seconds))) != nil else { return nil }
                return lineRead.hasHappened ? nil : .timedOut
            }
            for await ending in group {
                if let ending {
                    group.cancelAll()
                    return ending
                }
            }
            return .timedOut
        }
        switch ending {
        case .notStarted(let why):
            throw TokenCommandError(message: "the token command `\(shown)` could not be started: \(why)")
        case .timedOut:
            throw TokenCommandError(
                message: "the token command `\(shown)` timed out after \(seconds) s; its messages are above")
        case .finished(.line(let line), _) where !line.isEmpty:
            guard Credential.isUsableToken(line) else {
                throw TokenCommandError(message: Credential.unusableToken("the token command `\(shown)`"))
            }
            return line
        case .finished(_, let status):
            // No token: the output ended (or its first line was empty); how the command ended says why.
            let why: String
            switch status {
            case .signaled(let signal): why = "was killed by signal \(signal)"
            case .exited(let status) where status != 0: why = "failed (exit \(status))"
            case .exited: throw TokenCommandError(message: "the token command `\(shown)` printed no token")
            }
            throw TokenCommandError(message: "the token command `\(shown)` \(why); its messages are above")
        }
    }

    /// Whether the command's line is in: from then on its time limit no longer applies.
    private final class LineRead: Sendable {
        private let state = Mutex(false)
        var hasHappened: Bool { state.withLock { $0 } }
        @Sendable func happened() { state.withLock { $0 = true } }
    }

    /// How a run of the command ended.
    private enum Ending: Sendable {
        /// Its output's first line (or its end), and how the command ended.
        case finished(FirstLine, TerminationStatus)
        case timedOut
        case notStarted(String)
    }

    /// Starts the command and reads its output's first line, while its time lasts (the task's):
    /// then ends it if its line was a token (or its time is up), and waits for it to end. Its output
    /// is a pipe of ours, read on NIO's event loops: a token may come from what the command left
    /// running after its own end (`(sleep 1; echo TOKEN) &`), which swift-subprocess's own output
    /// streams, ending with the command, would miss.
    private func runToItsEnd(lineRead: @escaping @Sendable () -> Void) async -> Ending {
        let output: (read: Int32, write: Int32)
        do {
            output = try ChildProcess.pipe()
        } catch {
            return .notStarted("\(error)")
        }
        let command = Self.backstop(seconds) + ["/bin/sh", "-c", self.command]
        let configuration = ChildProcess.configuration(
            command[0], Array(command.dropFirst()),
            environment: Self.environment(passing: passing, from: ProcessInfo.processInfo.environment),
            ownProcessGroup: true, grace: Self.grace)
        let reader: NIOAsyncChannel<ByteBuffer, Never>
        do {
            reader = try await NIOPipeBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .takingOwnershipOfDescriptor(input: output.read) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try NIOAsyncChannel<ByteBuffer, Never>(wrappingChannelSynchronously: channel)
                    }
                }
        } catch {
            close(output.read)
            close(output.write)
            return .notStarted("\(error)")
        }
        do {
            return try await reader.executeThenClose { inbound, _ in
                let result = try await Subprocess.run(
                    configuration, input: .none,
                    output: .fileDescriptor(FileDescriptor(rawValue: output.write), closeAfterSpawningProcess: true),
                    error: .currentStandardError
                ) { execution in
                    let line = await Self.firstLine(of: inbound)
                    if case .line(let token) = line, !token.isEmpty {
                        lineRead()
                        await Self.endGroup(of: execution)
                    } else if Task.isCancelled {
                        await Self.endGroup(of: execution)
                    }
                    return line
                }
                return .finished(result.closureResult, result.terminationStatus)
            }
        } catch {
            return .notStarted("\(error)")
        }
    }

    /// `timeout(1)` in front of the shell, where the system has it: a limit that holds if the
    /// worker itself is killed while the command runs (before a run handles signals, or by a
    /// wrapper's own timeout), when nothing would end a command in a process group of its own.
    /// Set past the worker's own limit and grace, so the worker's comes first.
    static func backstop(_ seconds: Int) -> [String] {
        let timeout = "/usr/bin/timeout"
        guard FileManager.default.isExecutableFile(atPath: timeout) else { return [] }
        let grace = Int(Self.grace / .seconds(1))
        return [timeout, "--kill-after=\(grace)s", "\(seconds + 2 * grace)s"]
    }

    /// Ends the command's process group: the command, and what it left running in the background,
    /// which outlives it (`helper & echo TOKEN`: the shell is gone at once, the helper would run on
    /// for ever). SIGTERM to all of them; SIGKILL to the group ``grace`` later if the command has
    /// not ended by then (swift-subprocess's teardown); then SIGKILL to what is left of the group.
    /// The group's id stays taken until the command is reaped, after this, so the signals reach no
    /// other process; a helper that is still there once the command has ended is not waited for,
    /// as that would mean asking again and again whether the group is empty.
    private static func endGroup<Input, Output, Error>(of execution: Execution<Input, Output, Error>) async {
        try? execution.send(signal: .terminate, toProcessGroup: true)
        await execution.teardown(using: [.gracefulShutDown(toProcessGroup: true, allowedDurationToNextStep: grace)])
        try? execution.send(signal: .kill, toProcessGroup: true)
    }

    enum FirstLine: Equatable, Sendable {
        case line(String)
        case ended
    }

    /// Reads `output` up to its first line break, its end, or 64 KiB; or until the task is
    /// cancelled (what came until then).
    static func firstLine(of output: NIOAsyncChannelInboundStream<ByteBuffer>) async -> FirstLine {
        var collected: [UInt8] = []
        func line(_ bytes: some Collection<UInt8>) -> FirstLine {
            // A CR of a CRLF line end goes too.
            .line(String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
        }
        do {
            for try await buffer in output {
                collected += buffer.readableBytesView
                if let newline = collected.firstIndex(of: UInt8(ascii: "\n")) { return line(collected[..<newline]) }
                if collected.count > 64 * 1024 { return line(collected) }
            }
        } catch {
            // A read error ends the output as its end does.
        }
        return collected.isEmpty ? .ended : line(collected)
    }
}
