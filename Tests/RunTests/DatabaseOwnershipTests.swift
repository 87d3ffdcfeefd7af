import DopeSync
import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The checkpoint database decides which records a run sends and where: a copy written by anyone
/// else (a producer in the spool's group, a run as root) is refused, never used.
@Suite struct DatabaseOwnershipTests {
    static func mode(_ path: String) -> mode_t? {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : nil
    }

    @Test("the database and its lock file are created 0600, and a wider mode is narrowed")
    func createdPrivate() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 2500)])
            try await withDevServer { server in
                #expect(await runWorker(spool, apiURL: server.baseURL, token: server.token).1 == .success)
            }
            for file in [spool.databasePath, spool.databaseLockPath] {
                #expect(Self.mode(file) == 0o600, "\(file)")
            }
            #expect(chmod(spool.databasePath, 0o644) == 0)
            _ = try CheckpointStore(spool: spool)
            #expect(Self.mode(spool.databasePath) == 0o600)
        }
    }

    @Test(
        "a database that another user put in place (a producer's forged copy) is refused: exit 73 naming owner, mode and the chown; nothing claimed or sent",
        .enabled(if: geteuid() == 0, "needs root to give a file to another user"))
    func anotherUsersDatabaseIsRefused() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 2510)
            let spool = try await makeSpool(in: directory, samples: [sample])
            _ = try CheckpointStore(spool: spool)
            // The producer's copy, moved over the real file: the same bytes, another owner.
            let forged = directory.appendingPathComponent("forged.sqlite").path
            try FileManager.default.copyItem(atPath: spool.databasePath, toPath: forged)
            #expect(chown(forged, 65534, 65534) == 0 && chmod(forged, 0o640) == 0)
            #expect(rename(forged, spool.databasePath) == 0)
            try await withDevServer { server in
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == 73, "\(output)")
                #expect(output.contains("\(spool.databasePath) belongs to"), "\(output)")
                #expect(output.contains("(mode 0640)"), "\(output)")
                #expect(output.contains("chown root: \(spool.databasePath)*"), "\(output)")
                #expect(try spool.names(.incoming) == ["\(sample.sessionID).tar.gz"])
                #expect(try await server.requestLog().filter { $0.path.hasPrefix("/api/") }.isEmpty)
            }
            // status only reads: it shows what the file says, and changes nothing.
            let status = try await runBuilt("dopesync", ["status", "--spool", spool.root])
            #expect(status.status == 0 && status.stdout.contains("read as it is on disk"), "\(status.stdout)")
            #expect(!FileManager.default.fileExists(atPath: spool.databasePath + "-wal"))
        }
    }

    @Test("a database that is a symlink is refused, not followed")
    func symlinkedDatabaseIsRefused() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 2520)])
            let elsewhere = directory.appendingPathComponent("elsewhere.sqlite").path
            _ = try CheckpointStore(path: elsewhere)
            #expect(symlink(elsewhere, spool.databasePath) == 0)
            try await withDevServer { server in
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == 73, "\(output)")
                #expect(output.contains("is a symbolic link"), "\(output)")
                #expect(try spool.names(.incoming).count == 1)
            }
        }
    }
}
