import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A fresh folder under the system's temporary folder, removed when the test is done with it.
final class TemporaryFolder {
    let path: String

    init(_ label: String = "checkpoint") throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("\(label)-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }

    func sub(_ name: String) -> String { path + "/" + name }
}

/// Writes `contents` to `path` and sets its mtime.
func writeFile(_ path: String, _ contents: String = "bundle", modified: Date? = nil) throws {
    try Data(contents.utf8).write(to: URL(fileURLWithPath: path))
    if let modified {
        try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: path)
    }
}

func contents(_ path: String) -> String? {
    FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
}

func names(in folder: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
}

func modificationTime(_ path: String) -> Date? {
    var info = stat()
    guard lstat(path, &info) == 0 else { return nil }
    return Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
}

/// A child process started with `posix_spawn`, its standard input and output on pipes.
///
/// Not Foundation's `Process`: its `waitUntilExit()` was seen hanging under the test runner after the child
/// was killed. Every pipe end this side keeps is close-on-exec, so a child started at the same time by
/// another test cannot inherit it (and keep a pipe open that a reader waits to see closed).
final class Spawned {
    let pid: pid_t
    let input: FileHandle
    let output: FileHandle
    private var status: Int32?
    private static let spawnLock = Mutex<Void>(())

    init(_ executable: String, _ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment) throws {
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
            let argv = ([executable] + arguments).map { strdup($0) } + [nil]
            let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
            defer {
                argv.forEach { free($0) }
                envp.forEach { free($0) }
            }
            var pid: pid_t = 0
            let result = posix_spawn(&pid, executable, &actions, nil, argv, envp)
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

    func send(_ line: String) throws {
        try input.write(contentsOf: Data((line + "\n").utf8))
    }

    func kill(_ signal: Int32) {
        _ = Glibc.kill(pid, signal)
    }

    /// Waits for the child to end; returns its exit status, or 128 + the signal that ended it.
    @discardableResult
    func wait() -> Int32 {
        if let status { return status }
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
        let exited = raw & 0x7f == 0
        let result = exited ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
        status = result
        return result
    }
}

extension FileHandle {
    /// Reads one line (without its newline), byte by byte: enough for a child's readiness signal.
    func readLine() -> String? {
        var bytes: [UInt8] = []
        while true {
            guard let data = try? read(upToCount: 1), let byte = data.first else { break }
            if byte == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte)
        }
        return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
    }
}
