import DopeSync
import DopeSyncTestSupport
import Foundation
import Testing

/// A child the tests start (and the isolated reader the worker starts) inherits its standard
/// input, output and error and nothing else. A fresh-clone CI run once hung for good: a pipe of
/// one test's `runProcess` (Foundation's pipes are not close-on-exec) was inherited by the
/// PostgreSQL cluster's watchdog, which another test started at that moment and which lives as
/// long as the suite, so the read waiting for that pipe's end never returned.
@Suite struct ChildProcessInheritanceTests {
    @Test func aChildStartedWhileAnotherPipeIsOpenDoesNotHoldThatPipe() throws {
        let pipe = Pipe()  // as `runProcess` makes them: inheritable
        let writeEnd = pipe.fileHandleForWriting.fileDescriptor
        #expect(fcntl(writeEnd, F_GETFD) & FD_CLOEXEC == 0, "the case this guards against: an inheritable end")
        let pipeInode = try #require(Self.target(of: "/proc/self/fd/\(writeEnd)"))

        // Long-lived, like a server or a watchdog; posix_spawn returns once it has run exec.
        let child = try Spawned("/bin/sleep", ["30"])
        defer {
            child.kill(SIGKILL)
            child.wait()
        }
        let inherited = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(child.pid)/fd")
            .compactMap { Self.target(of: "/proc/\(child.pid)/fd/\($0)") }
        #expect(!inherited.contains(pipeInode), "the child holds the other pipe's end: \(inherited)")
        #expect(inherited.count == 3, "standard input, output and error only: \(inherited)")

        // And so the reader sees the pipe's end as soon as this side closes it (not read when the
        // child holds it: that read would wait for the child).
        guard !inherited.contains(pipeInode) else { return }
        try pipe.fileHandleForWriting.close()
        #expect(pipe.fileHandleForReading.readDataToEndOfFile().isEmpty)
    }

    @Test func aChildStartsWithNoSignalBlockedNorIgnored() throws {
        let child = try Spawned("/bin/sleep", ["30"])
        defer {
            child.kill(SIGKILL)
            child.wait()
        }
        let status = try String(contentsOfFile: "/proc/\(child.pid)/status", encoding: .utf8)
        func mask(_ name: String) -> UInt64? {
            status.split(separator: "\n").first { $0.hasPrefix(name + ":") }
                .flatMap { UInt64($0.split(separator: "\t").last ?? "", radix: 16) }
        }
        // A blocked SIGTERM is why a token command once ran to its 30 s limit when told to stop.
        #expect(mask("SigBlk") == 0, "blocked in the child: \(String(mask("SigBlk") ?? 0, radix: 16))")
        // Signals 1 to 31 (bit n - 1 is signal n); glibc keeps its own real-time ones ignored.
        #expect((mask("SigIgn") ?? .max) & 0x7FFF_FFFF == 0, "ignored in the child")
    }

    /// What a descriptor refers to (`pipe:[1234]`, a path).
    static func target(of link: String) -> String? {
        try? FileManager.default.destinationOfSymbolicLink(atPath: link)
    }
}
