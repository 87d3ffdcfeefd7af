import DopeSync
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A child process started with `posix_spawn`, its standard input and output on pipes.
///
/// Not Foundation's `Process`: its `waitUntilExit()` was seen hanging under the test runner after the child
/// was killed. The child inherits its standard input, output and error and nothing else
/// (``SpawnInheritance``), and every pipe end this side keeps is close-on-exec, so no child started
/// at the same time by another test keeps a pipe open that a reader waits to see closed.
public final class Spawned: Sendable {
    public let pid: pid_t
    public let input: FileHandle
    public let output: FileHandle
    private let status = Mutex<Int32?>(nil)
    private static let spawnLock = Mutex<Void>(())

    /// With `silenceErrors`, the child's standard error goes to /dev/null.
    public init(
        _ executable: String, _ arguments: [String],
        environment: [String: String] = ProcessInfo.processInfo.environment,
        silenceErrors: Bool = false
    ) throws {
        // Spawns are serialised: between pipe() and fcntl(FD_CLOEXEC) another spawn could inherit an end
        // (glibc's pipe2 is not exported to Swift).
        let spawned: Result<(pid_t, Int32, Int32), POSIXError> = Self.spawnLock.withLock { _ in
            var inPipe: [Int32] = [0, 0]
            var outPipe: [Int32] = [0, 0]
            guard pipe(&inPipe) == 0 else { return .failure(POSIXError(.EMFILE)) }
            guard pipe(&outPipe) == 0 else { return .failure(POSIXError(.EMFILE)) }
            for descriptor in inPipe + outPipe { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_adddup2(&actions, inPipe[0], 0)
            posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
            if silenceErrors { posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0) }
            // Nothing else: a pipe another test's `runProcess` has open (Foundation's are not
            // close-on-exec) would stay open in this child, and in a server it starts (pg_ctl's
            // postgres, the cluster's watchdog) for as long as the suite runs, and that test's
            // read would never see the pipe's end.
            SpawnInheritance.closeAllButStandard(&actions)
            let argv = ([executable] + arguments).map { strdup($0) } + [nil]
            let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
            defer {
                for pointer in argv + envp { free(pointer) }
            }
            var attributes = posix_spawnattr_t()
            posix_spawnattr_init(&attributes)
            defer { posix_spawnattr_destroy(&attributes) }
            SpawnInheritance.startSignalsAfresh(&attributes)
            var pid: pid_t = 0
            let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
            close(inPipe[0])
            close(outPipe[1])
            guard result == 0 else {
                close(inPipe[1])
                close(outPipe[0])
                return .failure(POSIXError(POSIXErrorCode(rawValue: result) ?? .EINVAL))
            }
            return .success((pid, inPipe[1], outPipe[0]))
        }
        let (pid, inputDescriptor, outputDescriptor) = try spawned.get()
        self.pid = pid
        input = FileHandle(fileDescriptor: inputDescriptor, closeOnDealloc: true)
        output = FileHandle(fileDescriptor: outputDescriptor, closeOnDealloc: true)
    }

    public func send(_ line: String) throws {
        try input.write(contentsOf: Data((line + "\n").utf8))
    }

    public func kill(_ signal: Int32) {
        _ = Glibc.kill(pid, signal)
    }

    /// Waits for the child to end; returns its exit status, or 128 + the signal that ended it.
    @discardableResult
    public func wait() -> Int32 {
        // Under the lock: a second waiter waits for the first and gets the same status, instead of
        // reaping nothing (ECHILD) itself.
        status.withLock { status in
            if let status { return status }
            var raw: Int32 = 0
            while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
            let exited = raw & 0x7f == 0
            let result = exited ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
            status = result
            return result
        }
    }

    /// `wait()` on a thread of its own: for a child that talks to the in-process dev server.
    public func finished() async -> Int32 {
        await onOwnThread { self.wait() }
    }
}

/// Runs blocking work (waiting for a child process, reading its pipe) on a thread of its own, so
/// it never holds one of the cooperative pool's threads. On a 2-core machine that pool has two,
/// and the in-process dev server a child talks to needs them: two tests blocking at once there
/// stall the server until the child's requests time out.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}

extension Spawned {
    /// The child's output, line by line as it comes, read on a thread of its own to its end (so a
    /// test that stops listening never makes the child block on a full pipe).
    public func lines() -> AsyncStream<String> {
        let (lines, continuation) = AsyncStream.makeStream(of: String.self)
        Thread { [output] in
            while let line = output.readLine() { continuation.yield(line) }
            continuation.finish()
        }.start()
        return lines
    }

    /// The first line of the output that holds every one of `parts`; nil if the output ends first.
    public func firstLine(containing parts: String...) async -> String? {
        for await line in lines() where parts.allSatisfy(line.contains) { return line }
        return nil
    }
}

extension FileHandle {
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
