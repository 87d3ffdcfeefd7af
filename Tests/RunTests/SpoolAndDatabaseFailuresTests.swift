import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import SQLiteSupport
import Testing

@testable import DopeSync
@testable import DopeSyncStore

#if canImport(Glibc)
    import Glibc
#endif

/// Failures of the spool's folders and of the checkpoint database that a run used to swallow:
/// each now names what failed and ends the run with 73, and no bundle is lost.
@Suite struct SpoolAndDatabaseFailuresTests {
    @Test("an incoming/ the run cannot read is not 'nothing to do': exit 73, naming the folder")
    func unreadableIncoming() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 41)])
            // Tests run as root, whom permissions do not stop: the run runs as nobody instead.
            for path in [directory.path, spool.root] + Spool.Folder.allCases.map({ spool.path($0) }) {
                chmod(path, 0o777)
            }
            chmod(spool.path(.incoming), 0o333)  // writable, not readable: bundles can arrive, not be listed
            let arguments = [
                "--reuid=65534", "--regid=65534", "--clear-groups", builtProduct("dopesync").path,
                "run", "--spool", spool.root, "--api", "http://127.0.0.1:9", "--min-age", "0", "--progress", "never",
            ]
            let result = try await runProcess(
                "setpriv", arguments, environment: ["DOPESYNC_API_TOKEN": "t"], allowFailure: true)
            chmod(spool.path(.incoming), 0o755)
            #expect(result.status == 73, "\(result.stderr)")
            #expect(result.stderr.contains("the spool cannot be read"))
            #expect(result.stderr.contains("incoming"))
            #expect(try spool.names(.incoming).count == 1)
        }
    }

    @Test(
        "a disk that fills between runs is named a full disk: exit 73, disk_full and the system's words, not \"disk I/O error\" alone",
        .enabled(if: geteuid() == 0, "needs root to mount a small tmpfs"))
    func aFullDiskIsNamed() async throws {
        try await withTemporaryDirectory { directory in
            let mount = directory.appendingPathComponent("small").path
            try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: false)
            _ = try await runProcess("/bin/mount", ["-t", "tmpfs", "-o", "size=2m", "tmpfs", mount])
            defer { _ = umount2(mount, Int32(MNT_DETACH)) }
            let spool = try await makeSpool(in: URL(fileURLWithPath: mount), samples: [SampleSession(seed: 42)])
            try await withDevServer { server in
                let (first, firstOutput) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(first == 0, "\(firstOutput)")
                try pack(SampleSession(seed: 43), into: spool, scratch: directory)
                // Then everything left is taken, as a producer's big file in tmp/ would take it.
                _ = try? await runProcess("/bin/sh", ["-c", "cat /dev/zero > '\(spool.path(.tmp))/big' 2>/dev/null"])
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == 73, "\(output)")
                #expect(output.contains("is full; free space") && output.contains("[disk_full]"), "\(output)")
                #expect(try spool.names(.incoming).count == 1)
            }
        }
    }

    @Test(
        "done/ on another file system: the run says it cannot move the bundle there, stops claiming and exits 73; once mended, the next run moves it without sending a record again",
        .enabled(if: geteuid() == 0, "needs root to mount a tmpfs over done/"))
    func doneOnAnotherFileSystem() async throws {
        try await withTemporaryDirectory { directory in
            let samples = [SampleSession(seed: 44), SampleSession(seed: 45)]
            let spool = try await makeSpool(in: directory, samples: samples)
            let done = spool.path(.done)
            // As an operator who mounts an archive disk at done/: every rename into it is EXDEV.
            _ = try await runProcess("/bin/mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", done])
            defer { _ = umount2(done, Int32(MNT_DETACH)) }  // also when the test throws; a second time is a no-op
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, ["--concurrency", "1"])
                _ = umount2(done, Int32(MNT_DETACH))
                #expect(status == 73, "\(output)")
                #expect(output.contains("cannot move a bundle to done/: the spool cannot be written"), "\(output)")
                #expect(output.contains(String(cString: strerror(EXDEV))), "\(output)")
                // The first bundle waits in processing/, uploaded; the second was never claimed.
                #expect(try spool.names(.processing).count == 1 && spool.names(.incoming).count == 1)
                #expect(try await server.createdCounts()["session"] == 1)

                let (again, againOutput) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(again == 0, "\(againOutput)")
                #expect(try spool.names(.done).count == 2 && spool.names(.processing).isEmpty)
                #expect(try await server.createdCounts()["session"] == 2, "each session sent once")
            }
        }
    }

    @Test(
        "a deferral whose move back to incoming/ fails: exit 73, the bundle stays in processing/, and the next run defers it there",
        .enabled(if: geteuid() == 0, "needs root to mount a tmpfs over incoming/"))
    func deferralThatCannotMoveBack() async throws {
        try await withTemporaryDirectory { directory in
            let blocked = BundleRefusalTests.blockedByAFirewall(seed: 47)
            let spool = try await makeSpool(in: directory, samples: [blocked])
            let name = "\(blocked.sessionID).tar.gz"
            // An orphan, as a run killed mid-upload leaves it: taken where it is, with no rename
            // out of incoming/, so a mount over incoming/ refuses only the deferral's move back.
            #expect(rename(spool.path(.incoming, name), spool.path(.processing, name)) == 0)
            let incoming = spool.path(.incoming)
            _ = try await runProcess("/bin/mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", incoming])
            defer { _ = umount2(incoming, Int32(MNT_DETACH)) }  // also when the test throws; a second time is a no-op
            try await withDevServer(BundleRefusalTests.firewalled) { server in
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                _ = umount2(incoming, Int32(MNT_DETACH))
                #expect(status == 73, "\(output)")
                #expect(output.contains("cannot move a bundle to incoming/: the spool cannot be written"), "\(output)")
                #expect(output.contains(String(cString: strerror(EXDEV))), "\(output)")
                #expect(try spool.names(.processing) == [name] && spool.names(.incoming).isEmpty, "in one folder")

                let (again, againOutput) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(again == 0, "\(againOutput)")
                #expect(againOutput.contains("bundle deferred"), "\(againOutput)")
                #expect(try spool.names(.incoming) == [name] && spool.names(.processing).isEmpty, "in one folder")
                #expect((try await server.createdCounts()["session"] ?? 0) == 0, "the firewall let nothing through")
            }
        }
    }

    @Test(
        "a bundle the machine cannot open (no descriptor left, a failing disk) is deferred as io_error, not failed; requeued, the next run syncs it",
        arguments: [EMFILE, EIO])
    func aReadingTheMachineCutShortIsDeferred(error: Int32) async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 48)
            let spool = try await makeSpool(in: directory, samples: [sample])
            let name = "\(sample.sessionID).tar.gz"
            // Every open under processing/ refused: the claim (in incoming/) goes through, the reading does not.
            let refused = try await OpenRefused(in: directory, opensOf: "/processing/", failWith: error)
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, environment: refused.environment)
                #expect(status == 0, "\(output)")
                #expect(output.contains("cannot read the bundle: the bundle is deferred, not blamed"), "\(output)")
                #expect(output.contains(String(cString: strerror(error))), "\(output)")
                #expect(try spool.names(.incoming) == [name] && spool.names(.failed).isEmpty, "not blamed")
                let deferred = try CheckpointStore(spool: spool).bundleState(name: name)
                #expect(deferred?.lastError?.reason == FailureReason(.io), "\(String(describing: deferred))")

                // Due now, as an operator makes it once the machine is mended.
                let requeue = try await runBuilt("dopesync", ["requeue", name, "--spool", spool.root])
                #expect(requeue.status == 0, "\(requeue.stderr)")
                let (again, againOutput) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(again == 0, "\(againOutput)")
                #expect(try spool.names(.done) == [name])
                #expect(try await server.createdCounts()["session"] == 1)
            }
        }
    }

    @Test(
        "a spool folder on a read-only mount (or outside the unit's ReadWritePaths=) is named so: exit 73, no chown advised",
        .enabled(if: geteuid() == 0, "needs root to mount a read-only tmpfs"))
    func aReadOnlySpoolFolderIsNamed() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 46)])
            let done = spool.path(.done)
            _ = try await runProcess("/bin/mount", ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", done])
            defer { _ = umount2(done, Int32(MNT_DETACH)) }
            // The run stops before it asks the API anything.
            let (status, output) = try await withRefusingPort { url in
                try await runToEnd(spool, apiURL: url, token: "t")
            }
            #expect(status == 73, "\(output)")
            #expect(output.contains("spool folder \(done) is on a file system that is read-only for root"), "\(output)")
            #expect(output.contains("ReadWritePaths=\(done)"), "\(output)")
            #expect(!output.contains("chown"), "root owns it already: \(output)")
            #expect(try spool.names(.incoming).count == 1)
        }
    }

    @Test("a checkpoint update that fails after the move to done/ is reported with where the bundle went: exit 73")
    func checkpointUpdateAfterMoveFails() async throws {
        try await withTemporaryDirectory { directory in
            let samples = [SampleSession(seed: 42)]
            let spool = try await makeSpool(in: directory, samples: samples)
            // The database refuses to record any bundle as done, as a full or failing disk would.
            _ = try CheckpointStore(spool: spool)  // the schema, made as a run makes it
            try await onOwnThread { [path = spool.databasePath] in
                try SQLiteDatabase(path: path).write { connection in
                    try connection.execute(
                        """
                        CREATE TRIGGER refuse_done BEFORE UPDATE OF last_outcome ON bundles WHEN NEW.last_outcome = 'done'
                        BEGIN SELECT RAISE(ABORT, 'disk trouble'); END
                        """)
                }
            }
            try await withDevServer { server in
                let result = try await runBuilt(
                    "dopesync",
                    [
                        "run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0", "--progress", "never",
                    ], environment: ["DOPESYNC_API_TOKEN": server.token])
                #expect(result.status == 73, "\(result.stderr)")
                let name = "\(samples[0].sessionID).tar.gz"
                #expect(
                    result.stderr.contains("the bundle moved but the checkpoint database could not record it"),
                    "\(result.stderr)")
                #expect(result.stderr.contains("done/\(name)"))
                #expect(result.stderr.contains("disk trouble"))
                #expect(try spool.names(.done) == [name])  // the bundle itself is safe
            }
        }
    }

    @Test("a link-then-unlink move whose unlink fails leaves the bundle in its folder only, not in two")
    func linkFallbackUndoesTheLink() async throws {
        try await withTemporaryDirectory { directory in
            let source = directory.appendingPathComponent("processing-b.tgz").path
            let target = directory.appendingPathComponent("done-b.tgz").path
            try directory.appendingPathComponent("processing-b.tgz").write(Array("bundle".utf8))
            // A file system without RENAME_NOREPLACE (NFS, some overlays), whose unlink then fails.
            let nfs = SpoolFiles.RenameCalls.system.withoutNoReplaceRename
            let calls = nfs.with(.failsWithoutHappening(EBUSY), on: .unlink, at: source)
            #expect(SpoolFiles.renameNoReplace(source, target, calls: calls) == EBUSY)
            #expect(FileManager.default.fileExists(atPath: source))
            #expect(!FileManager.default.fileExists(atPath: target))

            // The same fallback with a working unlink, on a kernel without renameat2, moves the file.
            var oldKernel = SpoolFiles.RenameCalls.system
            oldKernel.renameNoReplace = { _, _ in ENOSYS }
            #expect(SpoolFiles.renameNoReplace(source, target, calls: oldKernel) == 0)
            #expect(!FileManager.default.fileExists(atPath: source))
            #expect(FileManager.default.fileExists(atPath: target))
        }
    }
}
