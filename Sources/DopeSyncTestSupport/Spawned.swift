import DopeSync
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A child process started with `posix_spawn`, its standard input and output (and its standard
/// error, if asked) on pipes: how the tests start every program, whether they talk to it as it
/// runs or, through ``runProcess(_:_:in:environment:stdin:allowFailure:)``, run it to its end.
///
/// Not Foundation's `Process`: its `waitUntilExit()` was seen hanging under the test runner after the child
/// was killed, and its pipes are not close-on-exec. The child inherits its standard input, output and
/// error and nothing else (``SpawnInheritance``), and every pipe end this side keeps is close-on-exec, so
/// no child started at the same time by another test keeps a pipe open that a reader waits to see closed.
public final class Spawned: Sendable {
    /// Where the child's standard error goes.
    public enum ErrorOutput: Sendable {
        /// Where this process's goes.
        case inherited
        /// To /dev/null.
        case silenced
        /// Into a pipe of its own, read through ``Spawned/errors``.
        case piped
    }

    public let pid: pid_t
    public let input: FileHandle
    public let output: FileHandle
    /// The child's standard error, when it was started with ``ErrorOutput/piped``.
    public let errors: FileHandle?
    private let status = Mutex<Int32?>(nil)
    private static let spawnLock = Mutex<Void>(())

    /// Starts `executable` (a path: no PATH lookup) with `arguments`, in `directory` if one is given.
    public init(
        _ executable: String, _ arguments: [String],
        environment: [String: String] = ProcessInfo.processInfo.environment,
        in directory: URL? = nil, errors errorOutput: ErrorOutput = .inherited
    ) throws {
        var command = [executable] + arguments
        if let directory, Self.addChdir == nil {
            command = ["/bin/sh", "-c", #"cd -- "$0" && exec "$@""#, directory.path] + command
        }
        // Spawns are serialised: between pipe() and fcntl(FD_CLOEXEC) another spawn could inherit an end
        // (glibc's pipe2 is not exported to Swift).
        let spawned: Result<(pid_t, [Int32]), POSIXError> = Self.spawnLock.withLock { _ in
            // One pipe for each of the child's descriptors 0, 1 and (piped) 2; the child's end of
            // the first is its read end, of the others the write end.
            var pipes: [[Int32]] = []
            for _ in 0..<(errorOutput == .piped ? 3 : 2) {
                var ends: [Int32] = [0, 0]
                guard pipe(&ends) == 0 else {
                    let failure = POSIXError(POSIXErrorCode(rawValue: errno) ?? .EMFILE)
                    for descriptor in pipes.joined() { close(descriptor) }
                    return .failure(failure)
                }
                for descriptor in ends { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
                pipes.append(ends)
            }
            let childEnds = pipes.indices.map { pipes[$0][$0 == 0 ? 0 : 1] }
            let ownEnds = pipes.indices.map { pipes[$0][$0 == 0 ? 1 : 0] }
            // Nothing else is inherited (SpawnInheritance): a descriptor this process has open
            // without close-on-exec (a Foundation `Pipe`'s, say) would stay open in this child, and
            // in a server it starts (pg_ctl's postgres, the cluster's watchdog) for as long as the
            // suite runs, and whoever reads that pipe would never see its end.
            let spawned = SpawnInheritance.spawn(
                command[0], command, environment: environment.map { "\($0.key)=\($0.value)" }
            ) { actions in
                for (descriptor, end) in childEnds.enumerated() {
                    posix_spawn_file_actions_adddup2(&actions, end, Int32(descriptor))
                }
                if errorOutput == .silenced { posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0) }
                if let directory, let addChdir = Self.addChdir { _ = addChdir(&actions, directory.path) }
            }
            for descriptor in childEnds { close(descriptor) }
            if case .failure = spawned { for descriptor in ownEnds { close(descriptor) } }
            return spawned.map { ($0, ownEnds) }
        }
        let (pid, ends) = try spawned.get()
        let handles = ends.map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) }
        self.pid = pid
        input = handles[0]
        output = handles[1]
        errors = handles.count > 2 ? handles[2] : nil
    }

    private typealias AddChdir =
        @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>)
        -> Int32

    /// glibc 2.29's `posix_spawn_file_actions_addchdir_np` (which copies the path), looked up at
    /// run time as ``SpawnInheritance`` looks up addclosefrom: Swift's Glibc module does not
    /// declare it. Without it, a child with a directory starts through `sh`, which goes there first.
    private static let addChdir: AddChdir? = dlsym(nil, "posix_spawn_file_actions_addchdir_np").map {
        unsafeBitCast($0, to: AddChdir.self)
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

    /// `wait()` on a thread of its own (see ``onOwnThread(_:)``).
    public func finished() async -> Int32 {
        await onOwnThread { self.wait() }
    }
}

/// Runs blocking work (waiting for a child process, reading or writing its pipes: all of
/// `runProcess`'s waiting) on a thread of its own, so it never holds one of the cooperative pool's
/// threads. On a 2-core machine that pool has two, and the in-process dev server a child talks to
/// needs them: two tests blocking at once there stall the server until the child's requests time out.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
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
