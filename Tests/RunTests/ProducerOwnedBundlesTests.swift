import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The production setup: the worker runs as a user of its own, and the bundles belong to the
/// producers who dropped them, so the worker can move them but not change their times.
@Suite(.enabled(if: geteuid() == 0, "needs root to make the worker and producer users' files"))
struct ProducerOwnedBundlesTests {
    /// `nobody`, who runs the worker here.
    static let worker: uid_t = 65534
    /// A producer: a uid with no name, as good as any.
    static let producer: uid_t = 65533

    /// The built `dopesync run` as the worker user (`setpriv`), to its end.
    static func runAsWorker(_ spool: Spool, server: RunningDevServer) async throws -> (status: Int32, output: String) {
        let arguments = [
            "--reuid=\(worker)", "--regid=\(worker)", "--clear-groups", "--",
            "/bin/sh", "-c", #"exec "$0" "$@" 2>&1"#, builtProduct("dopesync").path,
            "run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0", "--progress", "never",
        ]
        var environment = childEnvironment.filter { !proxyVariables.contains($0.key) }
        environment["DOPESYNC_API_TOKEN"] = server.token
        environment["DOPESYNC_MIN_FREE_SPACE"] = "0"  // not the machine's free disk
        let run = try await Spawned("/usr/bin/setpriv", arguments, environment: environment)
        let output = await onOwnThread { run.output.readDataToEndOfFile() }
        return (await run.finished(), String(decoding: output, as: UTF8.self))
    }

    @Test(
        "with the API failing, five runs in a row claim the producers' bundles once: the retry time holds, nothing fails"
    )
    func retryScheduleHoldsForBundlesTheWorkerDoesNotOwn() async throws {
        try await withTemporaryDirectory { directory in
            #expect(chmod(directory.path, 0o755) == 0)
            let samples = (1...3).map { SampleSession(seed: UInt64(2600 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            for folder in [""] + Spool.Folder.allCases.map({ "/" + $0.rawValue }) {
                #expect(chown(spool.root + folder, Self.worker, Self.worker) == 0)
            }
            for name in try spool.names(.incoming) {
                #expect(chown(spool.path(.incoming, name), Self.producer, Self.producer) == 0)
                #expect(chmod(spool.path(.incoming, name), 0o644) == 0)
            }
            var configuration = DevServerConfiguration()
            configuration.faults.failRate = 1
            try await withDevServer(configuration) { server in
                var claimed: [Int] = []
                for _ in 1...5 {
                    let (status, output) = try await Self.runAsWorker(spool, server: server)
                    #expect([0, 75].contains(status), "\(output)")
                    let count = try #require(output.firstMatch(of: /run finished: (\d+) claimed/)?.1, "\(output)")
                    claimed.append(Int(count)!)
                }
                #expect(claimed == [samples.count, 0, 0, 0, 0])
                #expect(try spool.names(.failed).isEmpty)
                #expect(try spool.names(.incoming).count == samples.count)
                // status agrees with run, as the worker's user, and as root, who owns nothing there
                // and must leave nothing behind.
                let asWorker = try await runProcess(
                    "/usr/bin/setpriv",
                    [
                        "--reuid=\(Self.worker)", "--regid=\(Self.worker)", "--clear-groups", "--",
                        builtProduct("dopesync").path, "status", "--spool", spool.root,
                    ])
                #expect(asWorker.stdout.contains("(0 due now, 3 waiting for retry)"), "\(asWorker.stdout)")
                let asRoot = try await runBuilt("dopesync", ["status", "--spool", spool.root])
                #expect(asRoot.status == 0, "\(asRoot.stderr)")
                // Root may read anything: the database as it is on disk, not its own.
                #expect(asRoot.stdout.contains("(0 due now, 3 waiting for retry)"), "\(asRoot.stdout)")
                #expect(asRoot.stdout.contains("read as it is on disk"), "\(asRoot.stdout)")
                let everything = try FileManager.default.subpathsOfDirectory(atPath: spool.root)
                let rootsFiles = everything.filter { name in
                    var info = stat()
                    return lstat(spool.root + "/" + name, &info) == 0 && info.st_uid == 0
                }
                #expect(rootsFiles.isEmpty, "status as root left \(rootsFiles)")

                // The worker's user cannot touch a producer's file: requeue makes it due instead.
                let name = try spool.names(.incoming)[0]
                let requeue = try await runProcess(
                    "/usr/bin/setpriv",
                    [
                        "--reuid=\(Self.worker)", "--regid=\(Self.worker)", "--clear-groups", "--",
                        builtProduct("dopesync").path, "requeue", name, "--spool", spool.root,
                    ])
                #expect(requeue.stdout.contains("incoming/\(name) is due now"), "\(requeue.stdout)\(requeue.stderr)")
                let after = try await runBuilt("dopesync", ["status", "--spool", spool.root])
                // Due (just packed, it is still within status's default min-age of 5 s), no longer waiting.
                #expect(after.stdout.contains("2 waiting for retry"), "\(after.stdout)")
                #expect(!after.stdout.contains("\(name)  next attempt"), "\(after.stdout)")
            }
        }
    }

    @Test("status works for a user who may read the spool but not write it, and leaves nothing behind")
    func statusOnASpoolItCannotWrite() async throws {
        try await withTemporaryDirectory { directory in
            #expect(chmod(directory.path, 0o755) == 0)
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 2610)])
            // A run in a process of its own: when it has exited, its database is closed and whole.
            try await withDevServer { server in
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == 0, "\(output)")
            }
            // As an operator's group would have it: readable, not writable, by the one asking.
            #expect(chmod(spool.databasePath, 0o644) == 0)
            // Its WAL too, if the run left one (what it holds is read from a private copy).
            _ = chmod(spool.databasePath + "-wal", 0o644)
            let before = try FileManager.default.subpathsOfDirectory(atPath: spool.root).sorted()
            let report = try await runProcess(
                "/usr/bin/setpriv",
                [
                    "--reuid=\(Self.worker)", "--regid=\(Self.worker)", "--clear-groups", "--",
                    builtProduct("dopesync").path, "status", "--spool", spool.root,
                ])
            #expect(report.status == 0, "\(report.stderr)")
            #expect(report.stdout.contains("read as it is on disk"), "\(report.stdout)")
            #expect(report.stdout.contains("last run"), "\(report.stdout)")
            // Nothing new (the run's own WAL may still go away: its store closes a moment after it returns).
            let after = try FileManager.default.subpathsOfDirectory(atPath: spool.root)
            #expect(Set(after).isSubset(of: Set(before)), "status left \(Set(after).subtracting(before))")
        }
    }

    @Test("a spool folder the worker cannot write is exit 73 naming its owner, mode and the chown that fixes it")
    func unwritableSpoolSaysWhose() async throws {
        try await withTemporaryDirectory { directory in
            #expect(chmod(directory.path, 0o755) == 0)
            let spool = try await makeSpool(in: directory, samples: [])  // root's, 0755: nobody may only read it
            try await withDevServer { server in
                let (status, output) = try await Self.runAsWorker(spool, server: server)
                #expect(status == 73, "\(output)")
                #expect(output.contains("not writable by nobody: it belongs to root (mode 0755)"), "\(output)")
                #expect(output.contains("chown nobody \(spool.path(.tmp))"), "\(output)")
            }
        }
    }
}
