import DopeSync
import DopeSyncTestSupport
import Foundation
import SQLiteSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Tests that need a second real process running this package's code: the test binary starts itself
/// again with `DOPESYNC_TEST_CHILD` set and a filter that runs only ``TwoProcessTests/child()``.
@Suite struct TwoProcessTests {
    static let environment = ProcessInfo.processInfo.environment
    static let isChild = environment["DOPESYNC_TEST_CHILD"] != nil

    /// The child's side: does one job, then prints `done`. Disabled in a normal test run.
    @Test(.enabled(if: isChild)) func child() throws {
        let role = try #require(Self.environment["DOPESYNC_TEST_CHILD"])
        let spool = Spool(root: try #require(Self.environment["DOPESYNC_TEST_SPOOL"]))
        let count = Int(Self.environment["DOPESYNC_TEST_COUNT"] ?? "") ?? 0
        switch role {
        case "writer":
            try Self.write(spool: spool, prefix: "child", count: count, announce: true)
        case "claimer":
            let store = try CheckpointStore(spool: spool)
            Self.announceReadyAndWait()
            let claimed = try Self.claimAll(spool: spool, store: store, owner: ClaimOwner.current(runID: "child"))
            try claimed.joined(separator: "\n").write(
                toFile: spool.root + "/child-claims.txt", atomically: true, encoding: .utf8)
        default:
            Issue.record("unknown role \(role)")
        }
    }

    @Test(.enabled(if: !isChild)) func twoProcessesWriteTheSameDatabaseAtOnce() async throws {
        let folder = try TemporaryFolder("two-writers")
        let spool = Spool(root: folder.sub("spool"))
        try await spool.create()
        let count = 300
        let child = try await ChildProcess(role: "writer", spool: spool, count: count)
        try Self.write(spool: spool, prefix: "parent", count: count, startSignal: { try child.send("go") })
        try await child.finish()

        let store = try CheckpointStore(spool: spool)
        #expect(try store.completedSteps(sessionID: "parent").count == count)
        #expect(try store.completedSteps(sessionID: "child").count == count)
        #expect(try store.bundleState(name: "parent.tar.gz")?.stepsDone == count)
        #expect(try store.bundleState(name: "child.tar.gz")?.stepsDone == count)
        let check = try await onOwnThread { [path = spool.databasePath] in
            try SQLiteDatabase(path: path).read {
                try $0.queryFirst("PRAGMA integrity_check")?["integrity_check"] as String?
            }
        }
        #expect(check == "ok")
    }

    @Test(.enabled(if: !isChild)) func twoProcessesClaimingOneSpoolClaimEachBundleOnce() async throws {
        let folder = try TemporaryFolder("two-claimers")
        let spool = Spool(root: folder.sub("spool"))
        try await spool.create()
        let old = Date().addingTimeInterval(-60)
        for index in 0..<300 { try writeFile(spool.path(.incoming, "b\(index).tar.gz"), modified: old) }
        let store = try CheckpointStore(spool: spool)
        let child = try await ChildProcess(role: "claimer", spool: spool, count: 0)
        try child.send("go")
        let mine = try Self.claimAll(spool: spool, store: store, owner: ClaimOwner.current(runID: "parent"))
        try await child.finish()
        let theirs = try String(contentsOfFile: spool.root + "/child-claims.txt", encoding: .utf8).split(
            separator: "\n"
        ).map(String.init)
        #expect(Set(mine).isDisjoint(with: theirs))
        #expect(mine.count + theirs.count == 300)
        #expect(Set(mine + theirs).count == 300)
        #expect(try fileNames(in: spool.path(.processing)).count == 300)
        #expect(try store.claims().count == 300)
        print("parent claimed \(mine.count), child \(theirs.count)")
    }

    /// Records `count` steps of session `prefix`, each intent and result in its own transaction, the way a
    /// run does.
    static func write(
        spool: Spool, prefix: String, count: Int, announce: Bool = false, startSignal: () throws -> Void = {}
    ) throws {
        let store = try CheckpointStore(spool: spool)
        let bundle = "\(prefix).tar.gz"
        try store.recordClaim(name: bundle, sessionID: prefix, owner: ClaimOwner.current(runID: prefix))
        if announce {
            announceReadyAndWait()
        }
        try startSignal()
        for index in 0..<count {
            try store.recordIntent(
                sessionID: prefix, stepKey: "dope:\(index)", idempotencyKey: "\(prefix)-\(index)",
                requestFingerprint: "f", contentDigest: "d", bundleName: bundle)
            try store.recordResult(sessionID: prefix, stepKey: "dope:\(index)", serverID: Int64(index))
        }
        try store.recordDone(name: bundle, sessionID: prefix)
    }

    /// Tells the parent (on standard output, unbuffered) that the child is set up, and waits for its "go".
    static func announceReadyAndWait() {
        FileHandle.standardOutput.write(Data("ready\n".utf8))
        _ = readLine()
    }

    /// Claims every due bundle it can; returns the names it won.
    static func claimAll(spool: Spool, store: CheckpointStore, owner: ClaimOwner) throws -> [String] {
        var won: [String] = []
        for entry in try spool.scan(minAge: .zero) {
            guard let claim = try spool.claim(entry) else { continue }
            try store.recordClaim(name: claim.name, owner: owner)
            won.append(claim.name)
            claim.release()
        }
        return won
    }
}

/// This test binary, started again to run ``TwoProcessTests/child()`` in `role` (the arguments are the ones
/// `swift test` gives it for Swift Testing). The child prints `ready` once set up, then waits for a line on
/// its standard input, so both processes start their work together.
final class ChildProcess {
    let child: Spawned

    init(role: String, spool: Spool, count: Int) async throws {
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        var environment = childEnvironment
        environment["DOPESYNC_TEST_CHILD"] = role
        environment["DOPESYNC_TEST_SPOOL"] = spool.root
        environment["DOPESYNC_TEST_COUNT"] = String(count)
        child = try await Spawned(
            executable, ["--testing-library", "swift-testing", "--filter", "TwoProcessTests/child"],
            environment: environment)
        // Swift Testing prints its own lines too: wait for ours (on a thread of its own: the child
        // takes seconds to start, and the cooperative pool has two threads).
        let ready = await onOwnThread { [child] in
            while let line = child.output.readLine() {
                if line == "ready" { return true }
            }
            return false
        }
        if ready { return }
        throw ChildError(message: "the child process ended before it was ready (exit \(await child.finished()))")
    }

    func send(_ line: String) throws {
        try child.send(line)
    }

    /// Waits for the child and fails if its test failed.
    func finish() async throws {
        let transcript = await onOwnThread { [child] in
            var transcript: [String] = []
            while let line = child.output.readLine() { transcript.append(line) }
            return transcript
        }
        let status = await child.finished()
        guard status == 0 else {
            throw ChildError(message: "child exited with \(status):\n" + transcript.joined(separator: "\n"))
        }
    }

    struct ChildError: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }
}
