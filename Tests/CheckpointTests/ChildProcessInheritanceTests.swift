import DopeSync
import DopeSyncTestSupport
import Foundation
import Testing

/// A child the tests start (and the isolated reader the worker starts) inherits its standard
/// input, output and error and nothing else. A fresh-clone CI run once hung for good: a pipe of
/// one test's `runProcess` (then Foundation's `Process`, whose pipes are not close-on-exec) was
/// inherited by the PostgreSQL cluster's watchdog, which another test started at that moment and which lives as
/// long as the suite, so the read waiting for that pipe's end never returned.
@Suite struct ChildProcessInheritanceTests {
    @Test func aChildStartedWhileAnotherPipeIsOpenDoesNotHoldThatPipe() async throws {
        let pipe = Pipe()  // as Foundation makes them (the token command's, in-process): inheritable
        let writeEnd = pipe.fileHandleForWriting.fileDescriptor
        #expect(fcntl(writeEnd, F_GETFD) & FD_CLOEXEC == 0, "the case this guards against: an inheritable end")
        let pipeInode = try #require(Self.target(of: "/proc/self/fd/\(writeEnd)"))

        // Long-lived, like a server or a watchdog; the start returns once the child has run exec.
        let child = try await Spawned("/bin/sleep", ["30"])
        defer { child.kill(SIGKILL) }
        // An inherited descriptor keeps its number and what it refers to. What the child opens
        // itself (sleep reads its locale files as it starts, which a listing can catch) does not
        // match this process's descriptor of that number.
        let childDescriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(child.pid)/fd")
            .compactMap { number in Self.target(of: "/proc/\(child.pid)/fd/\(number)").map { (number, $0) } }
        let inherited = childDescriptors.filter { number, target in
            !["0", "1", "2"].contains(number) && Self.target(of: "/proc/self/fd/\(number)") == target
        }
        #expect(!childDescriptors.contains { $0.1 == pipeInode }, "the child holds the other pipe's end")
        #expect(inherited.isEmpty, "inherited beyond standard input, output and error: \(inherited)")

        // And so the reader sees the pipe's end as soon as this side closes it (not read when the
        // child holds it: that read would wait for the child).
        guard !childDescriptors.contains(where: { $0.1 == pipeInode }) else { return }
        try pipe.fileHandleForWriting.close()
        #expect(pipe.fileHandleForReading.readDataToEndOfFile().isEmpty)
    }

    @Test func aChildStartsWithNoSignalBlockedNorIgnored() async throws {
        // Ignored here, as a daemon ignores SIGHUP or SIGPIPE: an ignored signal stays ignored
        // across exec unless the child's start sets it back. SIGUSR2: nothing in the tests uses it.
        let before = signal(SIGUSR2, SIG_IGN)
        let child: Spawned
        do {
            defer { signal(SIGUSR2, before) }
            child = try await Spawned("/bin/sleep", ["30"])
        }
        defer { child.kill(SIGKILL) }
        let status = try String(contentsOfFile: "/proc/\(child.pid)/status", encoding: .utf8)
        func mask(_ name: String) -> UInt64? {
            status.split(separator: "\n").first { $0.hasPrefix(name + ":") }
                .flatMap { UInt64($0.split(separator: "\t").last ?? "", radix: 16) }
        }
        // A blocked SIGTERM is why a token command once ran to its 30 s limit when told to stop.
        #expect(mask("SigBlk") == 0, "blocked in the child: \(String(mask("SigBlk") ?? 0, radix: 16))")
        // Signals 1 to 31 (bit n - 1 is signal n); glibc keeps its own real-time ones ignored.
        #expect((mask("SigIgn") ?? .max) & 0x7FFF_FFFF == 0, "ignored in the child")
        #expect((mask("SigIgn") ?? .max) & (1 << (UInt64(SIGUSR2) - 1)) == 0, "ignored here, and so in the child")
    }

    /// A child gets the environment it is given and nothing of this process's.
    @Test func aChildGetsExactlyTheEnvironmentItIsGiven() async throws {
        let child = try await Spawned("/usr/bin/env", [], environment: ["ONLY": "this"])
        let output = await onOwnThread { child.output.readDataToEndOfFile() }
        #expect(await child.finished() == 0)
        #expect(String(decoding: output, as: UTF8.self) == "ONLY=this\n")
    }

    /// `runProcess`: the child gets its input, its folder and its variables, and descriptors 0, 1
    /// and 2 only; its output and errors come back apart, each read to its end while the other
    /// fills (a megabyte each, far more than a pipe holds).
    @Test func runProcessGivesInputFolderAndVariablesAndReadsBothStreamsToTheirEnds() async throws {
        let folder = try TemporaryFolder("run-process")
        let script = """
            cat
            echo "$(pwd -P) $GREETING" >&2
            ls /proc/self/fd >&2
            head -c 1000000 /dev/zero | tr '\\0' e >&2
            head -c 1000000 /dev/zero | tr '\\0' o
            """
        let result = try await runProcess(
            "sh", ["-c", script], in: folder.url, environment: ["GREETING": "hello"], stdin: Data("input\n".utf8))
        #expect(result.status == 0)
        #expect(result.stdout == "input\n" + String(repeating: "o", count: 1_000_000))
        // `ls`' own descriptors: 0, 1, 2 and 3, the folder it reads. The shell's would not do: its
        // pipelines and saved redirections hold descriptors of their own while `ls` looks.
        let expectedErrors = "\(folder.url.resolvingSymlinksInPath().path) hello\n0\n1\n2\n3\n"
        #expect(result.stderr == expectedErrors + String(repeating: "e", count: 1_000_000))
    }

    @Test func runProcessThrowsForAFailureUnlessAllowedAndSaysWhichSignal() async throws {
        let failure = await #expect(throws: ProcessFailure.self) {
            try await runProcess("sh", ["-c", "echo no >&2; exit 3"])
        }
        #expect(failure?.output.status == 3)
        #expect(failure?.description == "`sh -c echo no >&2; exit 3` exited 3: no\n")
        let killed = try await runProcess("sh", ["-c", "kill -KILL $$"], allowFailure: true)
        #expect(killed.status == 128 + SIGKILL)
    }

    /// What a descriptor refers to (`pipe:[1234]`, a path).
    static func target(of link: String) -> String? {
        try? FileManager.default.destinationOfSymbolicLink(atPath: link)
    }
}
