import DopeSync
import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Producers cannot list or read each other's files in `tmp/` and `incoming/` (docs/spool.md, "What a producer can see"), and
/// the worker still reads and syncs every producer's bundle: proved on the spool the Debian package makes,
/// packaging/deb/dopesync/tmpfiles.conf (the folders' owners, modes and default ACLs), applied by
/// `systemd-tmpfiles --create` as postinst and every boot apply it, to a spool in a temporary folder. Its
/// users are real ones made by useradd for the test (and removed at its end): a worker user and its group, a
/// producers' group of which the worker is a member (as sysusers.conf has it), and two producers, whose
/// commands run as them through `runuser`.
@Suite(.enabled(if: geteuid() == 0 && systemdTmpfiles != nil, "needs root (useradd, runuser) and systemd-tmpfiles"))
struct ProducerIsolationTests {
    /// The package's spool, its users and group as they appear in tmpfiles.conf.
    static let packagedSpool = "/var/spool/dopesync"
    static let packagedWorker = "dopesync"
    static let packagedProducers = "dopesync-producers"

    /// The users and groups of one test, named with a suffix of their own (so that nothing on the machine,
    /// not even an installed dopesync package, is touched).
    struct Users {
        let worker: String
        let producers: String
        let producerA: String
        let producerB: String

        init() {
            let suffix = String(UUID().uuidString.prefix(6)).lowercased()
            worker = "dsiso-worker-\(suffix)"
            producers = "dsiso-producers-\(suffix)"
            producerA = "dsiso-a-\(suffix)"
            producerB = "dsiso-b-\(suffix)"
        }

        /// groupadd and useradd, as sysusers.conf (or postinst's fallback) makes the package's.
        func create() async throws {
            try await runProcess("groupadd", ["--system", producers])
            for user in [worker, producerA, producerB] {
                try await runProcess(
                    "useradd",
                    [
                        "--system", "--user-group", "--groups", producers, "--no-create-home",
                        "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", user,
                    ])
            }
        }

        /// Removes whatever of them exists; never throws (it runs after a failure too), and is not
        /// cancelled with a test past its time limit (``uncancelled(_:)``).
        func remove() async {
            await uncancelled { [worker, producerA, producerB, producers] in
                for user in [worker, producerA, producerB] {
                    _ = try? await runProcess("userdel", [user], allowFailure: true)
                    _ = try? await runProcess("groupdel", [user], allowFailure: true)  // if userdel left it
                }
                _ = try? await runProcess("groupdel", [producers], allowFailure: true)
            }
        }
    }

    /// Makes the users, runs `body`, then removes the users, whether `body` threw or not.
    static func withUsers<T>(_ body: (Users) async throws -> T) async throws -> T {
        let users = Users()
        do {
            try await users.create()
            let result = try await body(users)
            await users.remove()
            return result
        } catch {
            await users.remove()
            throw error
        }
    }

    /// The package's tmpfiles.conf for a spool at `root` and these users: each line's path, user and group
    /// fields and its ACL's `u:dopesync:` entries renamed, nothing else changed (the modes and ACLs are the
    /// shipped ones).
    static func tmpfilesConfiguration(spoolRoot root: String, users: Users) throws -> String {
        let shipped = try String(
            contentsOfFile: packageRoot() + "/packaging/deb/dopesync/tmpfiles.conf", encoding: .utf8)
        var lines: [String] = []
        for line in shipped.split(separator: "\n") where !line.hasPrefix("#") {
            var fields = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
            guard fields.count >= 6 else { continue }
            guard fields[1] == packagedSpool || fields[1].hasPrefix(packagedSpool + "/") else {
                Issue.record("tmpfiles.conf names a path outside the spool: \(line)")
                continue
            }
            fields[1] = root + fields[1].dropFirst(packagedSpool.count)
            if fields[2] == packagedWorker { fields[2] = users.worker }
            if fields[3] == packagedWorker { fields[3] = users.worker }
            let groups = [packagedProducers: users.producers, packagedWorker: users.worker]
            fields[4] = groups[fields[4]] ?? fields[4]
            if fields.count > 6 {
                fields[6] = fields[6].replacingOccurrences(
                    of: "u:\(packagedWorker):", with: "u:\(users.worker):")
            }
            lines.append(fields.joined(separator: " "))
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `command` as `user` (runuser), with the umask most users have (022), to its end.
    static func run(as user: String, _ command: String, _ arguments: [String]) async throws -> ProcessOutput {
        try await runProcess(
            runuser, ["-u", user, "--", "/bin/sh", "-c", #"umask 022 && exec "$@""#, "sh", command] + arguments,
            allowFailure: true)
    }

    /// The built `dopesync run` as `user` (runuser, which keeps the environment), to its end: its exit status
    /// and everything it wrote.
    static func runWorker(as user: String, _ spool: Spool, server: RunningDevServer) async throws -> (
        status: Int32, output: String
    ) {
        var environment = childEnvironment.filter { !proxyVariables.contains($0.key) }
        environment["DOPESYNC_API_TOKEN"] = server.token
        environment["DOPESYNC_MIN_FREE_SPACE"] = "0"  // not the machine's free disk
        let arguments = [
            "-u", user, "--", "/bin/sh", "-c", #"exec "$0" "$@" 2>&1"#, builtProduct("dopesync").path,
            "run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0", "--progress", "never",
        ]
        let run = try await Spawned(runuser, arguments, environment: environment)
        let output = await onOwnThread { run.output.readDataToEndOfFile() }
        return (await run.finished(), String(decoding: output, as: UTF8.self))
    }

    @Test(
        "with the package's tmpfiles.conf, a producer cannot list tmp/ or incoming/ nor read another's bundle there; the worker syncs both"
    )
    func producersCannotReadEachOthersBundles() async throws {
        try await withTemporaryDirectory { directory in
            #expect(chmod(directory.path, 0o755) == 0)  // the test's users go through it
            try await Self.withUsers { users in
                let spool = Spool(root: directory.appendingPathComponent("spool").path)
                let configuration = directory.appendingPathComponent("dopesync.conf")
                let text = try Self.tmpfilesConfiguration(spoolRoot: spool.root, users: users)
                try Data(text.utf8).write(to: configuration)
                // Not vacuous: the shipped file gives tmp/ and incoming/ their ACL lines.
                for folder in [spool.path(.tmp), spool.path(.incoming)] {
                    #expect(text.contains("\na \(folder) "), "\(text)")
                }
                let tmpfiles = try await runProcess(systemdTmpfiles!, ["--create", configuration.path])
                #expect(tmpfiles.stderr.isEmpty, "\(tmpfiles.stderr)")

                // Each producer's bundle, written into tmp/ and renamed into incoming/ (the producer's rules).
                var bundles: [String: String] = [:]
                for (index, producer) in [users.producerA, users.producerB].enumerated() {
                    let source = directory.appendingPathComponent("bundle-\(index).tar.gz").path
                    let sample = SampleSession(seed: UInt64(2700 + index))
                    let layout = directory.appendingPathComponent("layout-\(index)")
                    try sample.writeLayout(to: layout)
                    _ = try BundlePacker().pack(
                        sessionFile: layout.appendingPathComponent("session.json").path, imagesDirectory: nil,
                        destination: .file(source))
                    #expect(chmod(source, 0o644) == 0)
                    let name = "\(producer).tar.gz"
                    let copied = try await Self.run(as: producer, "cp", [source, spool.path(.tmp, name)])
                    #expect(copied.status == 0, "\(copied.stderr)")
                    bundles[producer] = name
                }
                let a = users.producerA
                let b = users.producerB
                let bundleA = try #require(bundles[a])
                let bundleB = try #require(bundles[b])

                // In tmp/: A cannot list it, nor read B's bundle by its name; it reads its own.
                #expect(try await Self.run(as: a, "ls", [spool.path(.tmp)]).status != 0)
                #expect(try await Self.run(as: a, "cat", [spool.path(.tmp, bundleB)]).status != 0)
                #expect(try await Self.run(as: a, "cat", [spool.path(.tmp, bundleA)]).status == 0)
                for producer in [a, b] {
                    let name = try #require(bundles[producer])
                    let moved = try await Self.run(
                        as: producer, "mv", [spool.path(.tmp, name), spool.path(.incoming, name)])
                    #expect(moved.status == 0, "\(moved.stderr)")
                }
                // In incoming/: the same, and the session id cannot be read out of B's bundle (the attack).
                let listing = try await Self.run(as: a, "ls", [spool.path(.incoming)])
                #expect(listing.status != 0, "\(users.producerA) listed incoming/: \(listing.stdout)")
                let read = try await Self.run(as: a, "cat", [spool.path(.incoming, bundleB)])
                #expect(read.status != 0 && read.stdout.isEmpty, "\(users.producerA) read \(bundleB)")
                let attack = try await Self.run(as: a, "tar", ["xzOf", spool.path(.incoming, bundleB), "session.json"])
                #expect(attack.status != 0 && attack.stdout.isEmpty, "\(attack.stdout)")
                #expect(try await Self.run(as: a, "rm", ["-f", spool.path(.incoming, bundleB)]).status != 0)
                #expect(try await Self.run(as: a, "cat", [spool.path(.incoming, bundleA)]).status == 0)
                // Its owner opening it to others changes nothing for a producer (the group entry, which
                // every producer matches, grants nothing).
                #expect(try await Self.run(as: b, "chmod", ["0644", spool.path(.incoming, bundleB)]).status == 0)
                #expect(try await Self.run(as: a, "cat", [spool.path(.incoming, bundleB)]).status != 0)

                // The built `dopesync run`, as the worker user, syncs both.
                try await withDevServer { server in
                    let (status, output) = try await Self.runWorker(as: users.worker, spool, server: server)
                    #expect(status == 0, "\(output)")
                    #expect(output.contains("run finished: 2 claimed, 2 done, 0 deferred, 0 failed"), "\(output)")
                }
                #expect(try spool.names(.done) == [bundleA, bundleB].sorted())
                #expect(try spool.names(.incoming).isEmpty)
                for (producer, name) in bundles {
                    var info = stat()
                    #expect(stat(spool.path(.done, name), &info) == 0)
                    #expect(
                        info.st_uid == (getpwnam(producer)?.pointee.pw_uid ?? 0), "done/\(name) is not \(producer)'s")
                }
            }
        }
    }
}

/// systemd-tmpfiles, where it is installed.
let systemdTmpfiles = ["/usr/bin/systemd-tmpfiles", "/bin/systemd-tmpfiles"].first(
    where: FileManager.default.isExecutableFile)

/// runuser (util-linux).
let runuser = ["/usr/sbin/runuser", "/sbin/runuser"].first(where: FileManager.default.isExecutableFile) ?? "runuser"
