import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A producer's bundle the worker's user may not read (mode 0600) is a failure a person sees:
/// in `failed/` with its reason and fix, in `status`, in the exit code. It used to stay in
/// `incoming/` for good, shown as due, with "cannot claim" in a log only.
@Suite(.enabled(if: geteuid() == 0, "needs root to make the worker's user and a producer's file"))
struct UnreadableBundleTests {
    @Test(
        "a 0600 bundle of another user fails as io_error naming its mode and the fix; once readable, requeue sends it")
    func anUnreadableBundleFailsVisibly() async throws {
        // A name of this run's own: another suite on this machine may run at the same time.
        let worker = "dopesync-t-unread-" + UUID().uuidString.prefix(8).lowercased()
        try await SessionOwnershipTests.withProducers([worker]) { uids in
            try await withTemporaryDirectory { directory in
                let sample = SampleSession(seed: 9_800)
                let spool = try await makeSpool(in: directory, samples: [sample])
                let name = "\(sample.sessionID).tar.gz"
                // The spool is the worker's; the bundle stays root's, 0600.
                #expect(spool.give(to: uids[0], opening: directory))
                #expect(chmod(spool.path(.incoming, name), 0o600) == 0)
                try await withDevServer { server in
                    func asWorker(_ arguments: [String]) async throws -> ProcessOutput {
                        try await runDopesync(as: worker, arguments, token: server.token)
                    }
                    let run = try await asWorker([
                        "run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0",
                    ])
                    #expect(run.status == 1, "\(run.stderr)")
                    #expect(try spool.names(.failed).contains(name))
                    let sidecar = try String(
                        contentsOfFile: spool.path(.failed, Spool.sidecarName(forFailed: name)), encoding: .utf8)
                    #expect(sidecar.contains("reason: io_error"), "\(sidecar)")
                    #expect(sidecar.contains("\(worker) may not read it (owner root, mode 0600)"), "\(sidecar)")
                    let status = try await asWorker(["status", "--spool", spool.root])
                    #expect(
                        status.stdout.contains("failed (1)") && status.stdout.contains("mode 0600"), "\(status.stdout)")

                    // The producer fixes its mode; the operator requeues.
                    #expect(chmod(spool.path(.failed, name), 0o644) == 0)
                    let requeued = try await asWorker(["requeue", name, "--spool", spool.root])
                    #expect(requeued.status == 0, "\(requeued.stderr)")
                    let again = try await asWorker([
                        "run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0",
                    ])
                    #expect(again.status == 0, "\(again.stderr)")
                    #expect(try spool.names(.done) == [name])
                    #expect(try await server.createdCounts()["session"] == 1)
                }
            }
        }
    }

    @Test(
        "an orphan in processing/ the worker may not read waits there, named with the fix: exit 73, the other bundles go on; once readable it resumes"
    )
    func anUnreadableOrphanIsNamed() async throws {
        let worker = "dopesync-t-orphan-" + UUID().uuidString.prefix(8).lowercased()
        let someoneElse = "dopesync-t-other-" + UUID().uuidString.prefix(8).lowercased()
        try await SessionOwnershipTests.withProducers([worker, someoneElse]) { uids in
            try await withTemporaryDirectory { directory in
                let (orphan, other) = (SampleSession(seed: 9_805), SampleSession(seed: 9_806))
                let spool = try await makeSpool(in: directory, samples: [orphan, other])
                let (orphanName, otherName) = ("\(orphan.sessionID).tar.gz", "\(other.sessionID).tar.gz")
                // Claimed by a run that died, then made 0600 by its producer (root): no lock can be
                // taken on it, so nothing tells whether a live run still has it.
                #expect(rename(spool.path(.incoming, orphanName), spool.path(.processing, orphanName)) == 0)
                #expect(chmod(spool.path(.processing, orphanName), 0o600) == 0)
                #expect(spool.give(to: uids[0], with: [spool.path(.incoming, otherName)], opening: directory))
                try await withDevServer { server in
                    let run = try await runDopesync(as: worker, run: spool, against: server)
                    #expect(run.status == 73, "\(run.stderr)")
                    #expect(
                        run.stderr.contains("owner root, mode 0600") && run.stderr.contains("chmod g+r"),
                        "\(run.stderr)")
                    #expect(try spool.names(.done) == [otherName], "the others go on")
                    #expect(try spool.names(.processing) == [orphanName])
                    // status shows it, as a claim no run can take back, not as gone.
                    let status = try await runDopesync(
                        as: worker, ["status", "--spool", spool.root], token: server.token)
                    #expect(
                        status.stdout.contains("cannot be opened (owner root, mode 0600)")
                            && status.stdout.contains(orphanName), "\(status.stdout)")
                    // Another user's status, who may open no claim at all, says nothing of the worker's access.
                    let elsewhere = try await runDopesync(
                        as: someoneElse, ["status", "--spool", spool.root], token: server.token)
                    #expect(elsewhere.status == 0, "\(elsewhere.stderr)")
                    // It read the spool: its folder table counts the orphan in processing/.
                    let processingRow = elsewhere.stdout.split(separator: "\n").first { $0.hasPrefix("processing ") }
                    #expect(processingRow?.split(separator: " ").dropFirst().first == "1", "\(elsewhere.stdout)")
                    #expect(!elsewhere.stdout.contains("cannot be opened"), "\(elsewhere.stdout)")

                    #expect(chmod(spool.path(.processing, orphanName), 0o644) == 0)
                    let again = try await runDopesync(as: worker, run: spool, against: server)
                    #expect(again.status == 0, "\(again.stderr)")
                    #expect(try spool.names(.done) == [orphanName, otherName].sorted())
                    #expect(try await server.createdCounts()["session"] == 2)
                }
            }
        }
    }

    @Test(
        "on NFS, an orphan the worker may read but not write, so not lock, is shown by status as waiting for that fix, not as an orphan the next run takes back"
    )
    func anOrphanTheWorkerCannotLockOnNFSIsNamedInStatus() async throws {
        let worker = "dopesync-t-nfsorphan-" + UUID().uuidString.prefix(8).lowercased()
        try await SessionOwnershipTests.withProducers([worker]) { uids in
            try await withTemporaryDirectory { directory in
                let orphan = SampleSession(seed: 9_808)
                let spool = try await makeSpool(in: directory, samples: [orphan])
                let name = "\(orphan.sessionID).tar.gz"
                // Claimed by a run that died; root's, mode 0644: the worker may read it, not write it.
                #expect(rename(spool.path(.incoming, name), spool.path(.processing, name)) == 0)
                #expect(spool.give(to: uids[0], with: [], opening: directory))
                let nfs = try await NFSLocks(in: directory, locksOf: spool.root).environment
                try await withDevServer { server in
                    let run = try await runDopesync(as: worker, run: spool, against: server, environment: nfs)
                    #expect(run.status == 73, "\(run.stderr)")
                    #expect(run.stderr.contains("needs the bundle open for writing"), "\(run.stderr)")
                    let status = try await runDopesync(
                        as: worker, ["status", "--spool", spool.root], token: server.token, environment: nfs)
                    #expect(
                        status.stdout.contains("cannot be locked (owner root, mode 0644)")
                            && status.stdout.contains("exit 73, until the worker may write it"), "\(status.stdout)")
                    #expect(!status.stdout.contains("the next run takes it back"), "\(status.stdout)")

                    #expect(chown(spool.path(.processing, name), uids[0], uids[0]) == 0)
                    let fixed = try await runDopesync(
                        as: worker, ["status", "--spool", spool.root], token: server.token, environment: nfs)
                    #expect(
                        fixed.stdout.contains("owner dead: an orphan, the next run takes it back"), "\(fixed.stdout)")
                    let again = try await runDopesync(as: worker, run: spool, against: server, environment: nfs)
                    #expect(again.status == 0, "\(again.stderr)")
                    #expect(try spool.names(.done) == [name])
                    #expect(try await server.createdCounts()["session"] == 1)
                }
            }
        }
    }

    enum WhyNotMovable: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// Moves are a link and an unlink, and the kernel's fs.protected_hardlinks refuses the link.
        case nfs = "on NFS, another user's bundle"
        /// Only a file's owner may move it out of a folder with the sticky bit.
        case sticky = "incoming/ with the sticky bit"
        /// An NFS v4 client's exclusive lock needs the file open for writing.
        case nfsLocks = "on NFS, another user's bundle it may not write, so not lock"
        var testDescription: String { rawValue }
    }

    @Test(
        "a bundle the worker may read but not move out of incoming/ waits there, named with the fix: exit 73, the other bundles go on",
        arguments: WhyNotMovable.allCases)
    func aBundleTheWorkerCannotMoveIsNamed(why: WhyNotMovable) async throws {
        let worker = "dopesync-t-move-" + UUID().uuidString.prefix(8).lowercased()
        try await SessionOwnershipTests.withProducers([worker]) { uids in
            try await withTemporaryDirectory { directory in
                let (own, others) = (SampleSession(seed: 9_830), SampleSession(seed: 9_831))
                let spool = try await makeSpool(in: directory, samples: [own, others])
                // The other bundle stays root's, mode 0644: readable, not writable.
                #expect(
                    spool.give(
                        to: uids[0], with: [spool.path(.incoming, "\(own.sessionID).tar.gz")], opening: directory))
                if why == .sticky {  // as /tmp: root's, open to all, each file its owner's to move
                    #expect(chown(spool.path(.incoming), 0, 0) == 0 && chmod(spool.path(.incoming), 0o1777) == 0)
                }
                let environment =
                    switch why {
                    case .nfs: try await NoReplaceRenameRefused(in: directory).environment
                    case .nfsLocks: try await NFSLocks(in: directory, locksOf: spool.root).environment
                    case .sticky: [String: String]()
                    }
                try await withDevServer { server in
                    let run = try await runDopesync(as: worker, run: spool, against: server, environment: environment)
                    #expect(run.status == 73, "\(run.stderr)")
                    #expect(run.stderr.contains("a bundle cannot be claimed and waits where it is"), "\(run.stderr)")
                    let fix =
                        switch why {
                        case .nfs: "fs.protected_hardlinks"
                        case .nfsLocks:
                            "needs the bundle open for writing, and \(worker) may not write it (owner root, mode 0644)"
                        case .sticky: "chmod -t"
                        }
                    #expect(run.stderr.contains(fix), "\(run.stderr)")
                    #expect(try spool.names(.done) == ["\(own.sessionID).tar.gz"], "the others go on")
                    #expect(try spool.names(.incoming) == ["\(others.sessionID).tar.gz"], "in one folder")

                    #expect(chown(spool.path(.incoming, "\(others.sessionID).tar.gz"), uids[0], uids[0]) == 0)
                    let again = try await runDopesync(as: worker, run: spool, against: server, environment: environment)
                    #expect(again.status == 0, "\(again.stderr)")
                    #expect(try spool.names(.done).count == 2)
                    #expect(try await server.createdCounts()["session"] == 2)
                }
            }
        }
    }
}
