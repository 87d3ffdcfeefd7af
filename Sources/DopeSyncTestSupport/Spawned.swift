import DopeSync
import Foundation
import Subprocess
import Synchronization
import SystemPackage

#if canImport(Glibc)
    import Glibc
#endif

/// The environment a test's child starts from: what finds programs, the locale and time zone, a
/// home and a temporary folder, the user's name, and the sanitizers' settings (`make sanitize`).
/// Not the rest of the test runner's (a proxy, certificate bundles, a developer's `DOPESYNC_`
/// settings): a child of the worker gets a minimal environment too (`ChildProcess`), and a test's
/// outcome must not depend on the shell that started the suite. A test adds what its child needs.
public let childEnvironment: [String: String] = {
    let kept: Set = [
        "PATH", "HOME", "TMPDIR", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME",
        "DOPESYNC_SANITIZER", "ASAN_OPTIONS", "ASAN_SYMBOLIZER_PATH", "LSAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS",
        "SWIFT_BACKTRACE",
    ]
    return ProcessInfo.processInfo.environment.filter { kept.contains($0.key) }
}()

/// A child process, its standard input and output (and its standard error, if asked) on pipes:
/// how the tests start every program, whether they talk to it as it runs or, through
/// ``runProcess(_:_:in:environment:stdin:allowFailure:)``, run it to its end. Both start it as the
/// worker starts its children (``ChildProcess``, on swift-subprocess): descriptors 0, 1 and 2
/// only, so no child started at the same time by another test keeps a pipe open that a reader
/// waits to see closed, and signals at their defaults.
///
/// Not Foundation's `Process`: its `waitUntilExit()` was seen hanging under the test runner after the child
/// was killed, and its pipes are not close-on-exec. Every pipe end this side keeps is close-on-exec.
public final class Spawned: Sendable {
    /// Where the child's standard error goes.
    public enum ErrorOutput: Sendable, Equatable {
        /// Where this process's goes.
        case inherited
        /// To /dev/null.
        case silenced
        /// Into a pipe of its own, read through ``Spawned/errors``.
        case piped
        /// Appended to the file at this path (created if need be), read through
        /// ``Spawned/errorText``: kept for a failure's message without a reader draining a pipe.
        case file(String)
    }

    public let pid: pid_t
    public let input: FileHandle
    public let output: FileHandle
    /// The child's standard error, when it was started with ``ErrorOutput/piped``.
    public let errors: FileHandle?
    /// The file the child's standard error goes to, when it was started with ``ErrorOutput/file(_:)``.
    public let errorFile: String?
    /// swift-subprocess's run of the child, to its end (which it waits for without a thread): the
    /// child's status as a shell says it. A task of its own, as this object outlives the call that
    /// starts it; ``finished()`` awaits it. On NIO's loops, as ``runProcess(_:_:in:environment:stdin:allowFailure:)``
    /// runs: the cooperative pool has two threads here, which tests making sample bundles keep busy
    /// for seconds. (swift-subprocess still ends each run through a task of Swift's global
    /// executor, its cleanup handler's: a busy pool delays a child's end, but nothing waits on it
    /// in between.)
    private let run: Task<Int32, Never>
    /// Whether the child has ended (and so may be reaped, its pid free for another process).
    private let ended: Ended

    private final class Ended: Sendable {
        let flag = Atomic<Bool>(false)
    }

    /// How long a child whose run is cancelled has between SIGTERM and SIGKILL.
    static let grace = Duration.seconds(5)

    /// Starts `executable` (a path: no PATH lookup) with `arguments`, in `directory` if one is given.
    public init(
        _ executable: String, _ arguments: [String],
        environment: [String: String] = childEnvironment,
        in directory: URL? = nil, errors errorOutput: ErrorOutput = .inherited
    ) async throws {
        // One pipe for each of the child's descriptors 0, 1 and (piped) 2; the child's end of the
        // first is its read end, of the others the write end.
        _ = brokenPipesIgnored
        var pipes: [(read: Int32, write: Int32)] = []
        do {
            for _ in 0..<(errorOutput == .piped ? 3 : 2) { pipes.append(try ChildProcess.pipe()) }
        } catch {
            for ends in pipes {
                close(ends.read)
                close(ends.write)
            }
            throw error
        }
        let configuration = ChildProcess.configuration(
            executable, arguments, environment: environment, in: directory?.path, grace: Self.grace)
        let childInput = FileDescriptor(rawValue: pipes[0].read)
        let childOutput = FileDescriptor(rawValue: pipes[1].write)
        var childErrors = errorOutput == .piped ? FileDescriptor(rawValue: pipes[2].write) : nil
        let errorFile: String? = if case .file(let path) = errorOutput { path } else { nil }
        if let path = errorFile {
            let descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
            guard descriptor >= 0 else {
                let error = Errno(rawValue: errno)
                for ends in pipes {
                    close(ends.read)
                    close(ends.write)
                }
                throw error
            }
            childErrors = FileDescriptor(rawValue: descriptor)
        }
        let ended = Ended()
        let (started, starting) = AsyncStream.makeStream(of: Result<pid_t, any Error>.self)
        let running = Task(executorPreference: UploadExecutor.loops) {
            defer { ended.flag.store(true, ordering: .sequentiallyConsistent) }
            func run(error: some ErrorOutputProtocol) async throws -> TerminationStatus {
                try await Subprocess.run(
                    configuration, input: .fileDescriptor(childInput, closeAfterSpawningProcess: true),
                    output: .fileDescriptor(childOutput, closeAfterSpawningProcess: true), error: error
                ) { execution in
                    starting.yield(.success(execution.processIdentifier.value))
                }.terminationStatus
            }
            do {
                let status: TerminationStatus
                switch errorOutput {
                case .inherited: status = try await run(error: .currentStandardError)
                case .silenced: status = try await run(error: .discarded)
                case .piped, .file:
                    status = try await run(error: .fileDescriptor(childErrors!, closeAfterSpawningProcess: true))
                }
                return ChildProcess.shellStatus(status)
            } catch {
                starting.yield(.failure(error))
                return 127  // as a shell says "not started"
            }
        }
        // The child's ends are closed by swift-subprocess once it has started (or failed to).
        let ownEnds = [pipes[0].write] + pipes.dropFirst().map(\.read)
        run = running
        var pids = started.makeAsyncIterator()
        switch await pids.next() {
        case .success(let pid):
            self.pid = pid
        case .failure(let error):
            for descriptor in ownEnds { close(descriptor) }
            throw error
        case nil:
            // Only when the task starting it was cancelled: the child is ended with its run, and
            // this side's ends of its pipes closed, as no handle will own them.
            running.cancel()
            for descriptor in ownEnds { close(descriptor) }
            throw CancellationError()
        }
        let handles = ownEnds.map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) }
        input = handles[0]
        output = handles[1]
        errors = handles.count > 2 ? handles[2] : nil
        self.errorFile = errorFile
        self.ended = ended
    }

    public func send(_ line: String) throws {
        try input.write(contentsOf: Data((line + "\n").utf8))
    }

    /// Sends `signal` to the child, unless it has ended: its pid may be another process's by then.
    public func kill(_ signal: Int32) {
        guard !ended.flag.load(ordering: .sequentiallyConsistent) else { return }
        _ = Glibc.kill(pid, signal)
    }

    /// What the child wrote to its standard error so far, when it was started with
    /// ``ErrorOutput/file(_:)``: for a test's failure message.
    public var errorText: String {
        guard let errorFile else { return "(standard error not kept)" }
        return (try? String(contentsOfFile: errorFile, encoding: .utf8)) ?? "(\(errorFile) unreadable)"
    }

    /// Waits for the child to end; returns its exit status, or 128 + the signal that ended it. Any
    /// number of callers get the same status.
    ///
    /// A wait that is cancelled (a test past its time limit) ends the child with SIGKILL, then
    /// waits the moment it takes to go: Swift Testing waits for a timed-out test's body to return,
    /// and a child stuck for good (in a held file system, behind a lock) would hold the suite. A
    /// cleanup that must see its child to the end (a cluster's watchdog) waits ``uncancelled(_:)``.
    @discardableResult
    public func finished() async -> Int32 {
        await withTaskCancellationHandler {
            await run.value
        } onCancel: {
            kill(SIGKILL)
        }
    }
}

/// The result of a finished child process.
public struct ProcessOutput: Sendable {
    /// Its exit status, or 128 + the signal that ended it (as a shell says it).
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

public struct ProcessFailure: Error, CustomStringConvertible {
    public var command: [String]
    public var output: ProcessOutput
    public var description: String {
        "`\(command.joined(separator: " "))` exited \(output.status): \(output.stderr)\(output.stdout)"
    }
}

/// Runs a program to its end and collects its output; `executable` is looked up in PATH (this
/// process's), and `environment` is added to this process's. `stdin`, if any, is written to the
/// child's standard input, which is then closed (without it, the child reads an empty input).
///
/// Started as ``Spawned`` starts a child (``ChildProcess``); swift-subprocess writes its input and
/// reads its output and errors to their ends at once, so a chatty child never blocks on a full
/// pipe, and waits for it, all without a thread of its own, on NIO's loops.
@discardableResult
public func runProcess(
    _ executable: String,
    _ arguments: [String],
    in directory: URL? = nil,
    environment: [String: String]? = nil,
    stdin: Data? = nil,
    allowFailure: Bool = false
) async throws -> ProcessOutput {
    let variables = childEnvironment.merging(environment ?? [:]) { $1 }
    var configuration = ChildProcess.configuration(
        executable, arguments, environment: variables, in: directory?.path, grace: Spawned.grace)
    // A bare name is looked up in the child's PATH, as a shell finds it (swift-subprocess's `.name`).
    if !executable.contains("/") { configuration.executable = .name(executable) }
    _ = brokenPipesIgnored
    // On NIO's loops (see ``Spawned``): each chunk of output read resumes the reader.
    let result = try await withTaskExecutorPreference(UploadExecutor.loops) {
        try await Subprocess.run(
            configuration, input: .inputWriter, output: .data(limit: collectedOutputLimit),
            error: .data(limit: collectedOutputLimit)
        ) { execution in
            // A child that exits without reading its input makes the write fail (EPIPE): its exit
            // status says what went wrong.
            if let stdin, !stdin.isEmpty { _ = try? await execution.standardInputWriter.write(stdin) }
            try? await execution.standardInputWriter.finish()
        }
    }
    let output = ProcessOutput(
        status: ChildProcess.shellStatus(result.terminationStatus),
        stdout: String(decoding: result.standardOutput, as: UTF8.self),
        stderr: String(decoding: result.standardError, as: UTF8.self))
    if !allowFailure && output.status != 0 {
        throw ProcessFailure(command: [executable] + arguments, output: output)
    }
    return output
}

/// SIGPIPE ignored in this process, once: a write to a child's input that the child no longer
/// reads then fails with EPIPE instead of ending the test process. The children do not inherit it
/// (``ChildProcess`` sets every signal to its default in them).
private let brokenPipesIgnored: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

/// What ``runProcess(_:_:in:environment:stdin:allowFailure:)`` collects of a child's output, and
/// of its errors, at most: more fails the test (swift-subprocess throws). Far more than any test
/// reads; a child that writes more is one to stream with ``Spawned``.
private let collectedOutputLimit = 256 * 1024 * 1024

/// Runs blocking work (waiting for a child process, reading or writing its pipes: all of
/// `runProcess`'s waiting) on a thread of its own, so it never holds one of the cooperative pool's
/// threads. On a 2-core machine that pool has two, and the in-process dev server a child talks to
/// needs them: two tests blocking at once there stall the server until the child's requests time out.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}

/// Two sides of a race, each on a thread of its own and started together: `side` goes on until
/// `main` has returned (its argument then says so), and both results come back. Neither waits
/// for a thread of the cooperative pool, which a busy suite may hold for seconds while the side
/// already started spins a core.
public func race<Main: Sendable, Side: Sendable>(
    _ main: @escaping @Sendable () throws -> Main,
    alongside side: @escaping @Sendable (_ isOver: @Sendable () -> Bool) throws -> Side
) async throws -> (Main, Side) {
    try await onOwnThread { () throws -> (Main, Side) in
        let state = RaceSide<Side>()
        Thread {
            let result = Result { try side { state.over.load(ordering: .relaxed) } }
            state.result.withLock { $0 = result }
            state.ended.signal()
        }.start()
        let mainResult = Result { try main() }
        state.over.store(true, ordering: .relaxed)
        state.ended.wait()
        return (try mainResult.get(), try state.result.withLock { $0! }.get())
    }
}

/// What the side of a ``race(_:alongside:)`` is told, and what it leaves.
private final class RaceSide<Side: Sendable>: Sendable {
    let over = Atomic<Bool>(false)
    let result = Mutex<Result<Side, any Error>?>(nil)
    let ended = DispatchSemaphore(value: 0)
}

/// Runs `body` in a task of its own, which the caller's cancellation does not reach: for cleanup
/// that must finish when a test past its time limit is cancelled. swift-subprocess ends at once a
/// child started from a cancelled task (an `umount`, a `userdel`), and a cancelled
/// ``Spawned/finished()`` kills its child.
@discardableResult
public func uncancelled<T: Sendable>(_ body: @escaping @Sendable () async -> T) async -> T {
    await Task { await body() }.value
}

/// ``uncancelled(_:)`` for cleanup that throws.
@discardableResult
public func uncancelled<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await Task { try await body() }.value
}

/// ``onOwnThread(_:)`` for work that throws: a test's own call that blocks and is unavailable from
/// async code (opening a SQLite file to look into it or change it behind the worker's back).
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await onOwnThread { Result { try body() } }.get()
}

extension Spawned {
    /// The child's output, line by line as it comes (``FileHandle/lines()``).
    public func lines() -> AsyncStream<String> { output.lines() }

    /// The first line of the output that holds every one of `parts`; nil if the output ends first.
    public func firstLine(containing parts: String...) async -> String? {
        for await line in lines() where parts.allSatisfy(line.contains) { return line }
        return nil
    }
}

extension Spawned {
    /// Another process that holds an exclusive `flock` on `path` (made, with its folder, when
    /// missing; never truncated), as a live run holds a claim, a session or the database's write
    /// lock, until its input is closed or it is killed. Returns once the lock is held. `shared`:
    /// a shared one, as a run holds the checkpoints' `.dopesync.store.lock`.
    public static func holdingLock(on path: String, shared: Bool = false) async throws -> Spawned {
        // `exec cat`: the shell's descriptor, and with it the lock, lives as long as this pid.
        try await holding(
            "/bin/sh",
            [
                "-c", #"mkdir -p "${0%/*}" && exec 9>>"$0" && flock -n $1 9 && echo locked && exec cat"#, path,
                shared ? "-s" : "-x",
            ], describedAs: ["flock", path])
    }

    /// Another process that holds a write lock on the byte at `offset` of `path` (made when
    /// missing), a POSIX record lock, which excludes a run's `F_OFD_SETLK` on that byte as another
    /// run's would, until its input is closed or it is killed. Perl, which Debian always has
    /// (perl-base is essential), since no command-line tool takes such a lock; its whence is 0
    /// (SEEK_SET), which a bare `use Fcntl` does not export.
    public static func holdingByte(_ offset: Int, of path: String) async throws -> Spawned {
        let script = #"""
            use Fcntl; open(my $f, "+>>", $ARGV[0]) or die "open: $!";
            fcntl($f, F_SETLK, pack("s s x4 q q i x4", F_WRLCK, 0, $ARGV[1], 1, 0)) or die "lock: $!";
            $| = 1; print "locked\n"; <STDIN>;
            """#
        return try await holding("/usr/bin/perl", ["-e", script, path, "\(offset)"], describedAs: ["lock", path])
    }

    private static func holding(_ program: String, _ arguments: [String], describedAs command: [String]) async throws
        -> Spawned
    {
        let holder = try await Spawned(program, arguments)
        guard await onOwnThread({ holder.output.readLine() }) == "locked" else {
            holder.kill(SIGKILL)
            throw ProcessFailure(
                command: command, output: ProcessOutput(status: await holder.finished(), stdout: "", stderr: ""))
        }
        return holder
    }
}

extension FileHandle {
    /// What this pipe carries, line by line as it comes, read on a thread of its own to its end
    /// (so a test that stops listening never makes the child block on a full pipe).
    public func lines() -> AsyncStream<String> {
        let (lines, continuation) = AsyncStream.makeStream(of: String.self)
        Thread { [self] in
            while let line = readLine() { continuation.yield(line) }
            continuation.finish()
        }.start()
        return lines
    }

    /// Reads one line (without its newline), byte by byte: enough for a child's readiness signal.
    public func readLine() -> String? {
        var bytes: [UInt8] = []
        while true {
            // The end of the output, or a read error, ends the last line alike.
            guard let data = try? read(upToCount: 1), let byte = data.first else { break }
            if byte == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte)
        }
        return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
    }
}
