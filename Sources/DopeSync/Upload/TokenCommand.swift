import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One run of a token command (`token-command`): `/bin/sh -c COMMAND` under `timeout(1)` where
/// there is one, so a command that outlives its time is killed with what it started. It starts as
/// every child of the worker does (``SpawnInheritance``: descriptors 0 to 2 only, signals afresh),
/// in a process group of its own, with its output in a pipe of its own and its standard error on
/// ours (the log). Blocking: call it where a thread may wait (NIO's blocking pool in a run).
struct TokenCommand {
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

    /// The first line of the command's output, trimmed; throws, naming the command, when it fails,
    /// times out or prints nothing. Once the line is read, the command and what it left running
    /// are told to end (SIGTERM) and waited for a few seconds at most: what they still do is not
    /// the run's business.
    func run() throws(TokenCommandError) -> String {
        let (child, output) = try start()
        defer { close(output) }
        let limit = ContinuousClock.now + .seconds(seconds + 3)
        switch Self.firstLine(of: output, until: limit) {
        case .timedOut:
            Self.end(child)
            throw TokenCommandError(message: "the token command `\(shown)` took longer than \(seconds) s")
        case .line(let line) where !line.isEmpty:
            Self.end(child)
            guard Credential.isUsableToken(line) else {
                throw TokenCommandError(message: Credential.unusableToken("the token command `\(shown)`"))
            }
            return line
        case .line, .ended:
            // No token: the output ended (or its first line was empty); how the command ended says why.
            let why: String
            switch Self.wait(for: child, until: limit) {
            case .running:
                Self.end(child)
                throw TokenCommandError(message: "the token command `\(shown)` took longer than \(seconds) s")
            case .ended(.killed(let signal)): why = "was killed by signal \(signal)"
            case .ended(.exited(status: 124)): why = "timed out after \(seconds) s"
            case .ended(.exited(let status)) where status != 0: why = "failed (exit \(status))"
            case .ended, .gone:  // exit 0, or reaped elsewhere: its output said it all
                throw TokenCommandError(message: "the token command `\(shown)` printed no token")
            }
            throw TokenCommandError(message: "the token command `\(shown)` \(why); its messages are above")
        }
    }

    /// Starts the command; the child and the read end of its output.
    private func start() throws(TokenCommandError) -> (ChildProcess, Int32) {
        var pipe: [Int32] = [-1, -1]
        guard Glibc.pipe(&pipe) == 0 else {
            throw TokenCommandError(
                message: "the token command `\(shown)` could not be started: \(String(cString: strerror(errno)))")
        }
        // Close-on-exec at once (Swift's Glibc has no pipe2): only this child gets it, as its fd 1.
        for end in pipe { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        let timeout = "/usr/bin/timeout"
        let (path, arguments) =
            access(timeout, X_OK) == 0
            ? (timeout, ["timeout", "--kill-after=2", "\(seconds)", "/bin/sh", "-c", command])
            : ("/bin/sh", ["sh", "-c", command])
        let environment = Self.environment(passing: passing, from: ProcessInfo.processInfo.environment).map {
            "\($0.key)=\($0.value)"
        }
        let spawned = SpawnInheritance.spawn(path, arguments, environment: environment, ownProcessGroup: true) {
            actions in
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_adddup2(&actions, pipe[1], 1)
        }
        close(pipe[1])
        switch spawned {
        case .success(let pid):
            return (ChildProcess(pid: pid), pipe[0])
        case .failure(let error):
            close(pipe[0])
            throw TokenCommandError(message: "the token command `\(shown)` could not be started: \(error)")
        }
    }

    enum FirstLine: Equatable {
        case line(String)
        case ended
        case timedOut
    }

    /// Reads `output` up to its first line break, its end, or 64 KiB, until `limit`.
    static func firstLine(of output: Int32, until limit: ContinuousClock.Instant) -> FirstLine {
        var collected: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        func line(_ bytes: some Collection<UInt8>) -> FirstLine {
            // A CR of a CRLF line end goes too.
            .line(String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
        }
        while true {
            if let newline = collected.firstIndex(of: UInt8(ascii: "\n")) { return line(collected[..<newline]) }
            if collected.count > 64 * 1024 { return line(collected) }
            let left = limit - ContinuousClock.now
            guard left > .zero else { return .timedOut }
            var ready = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
            let polled = poll(&ready, 1, Int32(min((left / .milliseconds(1)).rounded(.up), 60_000)))
            if polled < 0 && errno != EINTR { return collected.isEmpty ? .ended : line(collected) }
            guard polled > 0 else { continue }
            let count = read(output, &buffer, buffer.count)
            if count < 0 && (errno == EINTR || errno == EAGAIN) { continue }
            guard count > 0 else { return collected.isEmpty ? .ended : line(collected) }
            collected += buffer[..<count]
        }
    }

    /// Asks `child`'s process group to end (SIGTERM): the command, and what it left running in the
    /// background, which outlives it (`helper & echo TOKEN`: the shell and `timeout` are gone at
    /// once, the helper would run on for ever). Reaps the command and waits for the rest, 3 s at
    /// most; then kills what is left.
    private static func end(_ child: ChildProcess) {
        let group = -child.pid
        kill(group, SIGTERM)
        let limit = ContinuousClock.now + .seconds(3)
        if wait(for: child, until: limit) == .running { child.killAndReap() }
        // The group's id stays taken while a member lives, so this reaches no other process.
        while kill(group, 0) == 0 && ContinuousClock.now < limit { usleep(10_000) }
        if kill(group, 0) == 0 { kill(group, SIGKILL) }
    }

    /// How `child` is at its end or at `limit`, asked every 10 ms: a token is read again once in a
    /// while, and this wait needs no thread or descriptor of its own.
    private static func wait(for child: ChildProcess, until limit: ContinuousClock.Instant) -> ChildProcess.State {
        while true {
            let state = child.state()
            if state != .running || ContinuousClock.now >= limit { return state }
            usleep(10_000)
        }
    }
}
