import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A worker cut off from PostgreSQL and not from the API, by a real network partition: it runs in
/// a network namespace of its own, reaching the API through one veth pair and the database
/// through another, whose host end is taken down mid-run. Packets are dropped, not refused: the
/// worker's statements hang, and only its own clock tells it when its leases may have run out.
@Suite struct PartitionTests {
    /// A namespace with two links to this host: 10.91.N.0/24 to the API, 10.92.N.0/24 to the database.
    struct Namespace {
        let name: String
        let subnet: Int
        var apiAddress: String { "10.91.\(subnet).1" }
        var databaseAddress: String { "10.92.\(subnet).1" }
        var databaseLink: String { "dsp\(subnet)d" }

        static func make() async throws -> Namespace {
            let subnet = try await freeSubnet()
            let namespace = Namespace(name: "dopesync-test-\(subnet)-\(getpid())", subnet: subnet)
            do {
                try await ip(["netns", "add", namespace.name])
                for (link, prefix) in [("dsp\(subnet)a", "10.91"), ("dsp\(subnet)d", "10.92")] {
                    try await ip(["link", "add", link, "type", "veth", "peer", "name", link + "n"])
                    try await ip(["link", "set", link + "n", "netns", namespace.name])
                    try await ip(["addr", "add", "\(prefix).\(subnet).1/24", "dev", link])
                    try await ip(["link", "set", link, "up"])
                    try await ip(["-n", namespace.name, "addr", "add", "\(prefix).\(subnet).2/24", "dev", link + "n"])
                    try await ip(["-n", namespace.name, "link", "set", link + "n", "up"])
                }
                try await ip(["-n", namespace.name, "link", "set", "lo", "up"])
            } catch {
                await namespace.remove()
                throw error
            }
            return namespace
        }

        /// A subnet no namespace or link of a live test process uses. Those of a test process that
        /// died (killed, or crashed before removing them) are removed first: their names carry
        /// the process's pid.
        static func freeSubnet() async throws -> Int {
            var used: Set<Int> = []
            let namespaces = try await runProcess("/usr/sbin/ip", ["netns", "list"]).stdout
            for line in namespaces.split(separator: "\n") {
                // `dopesync-test-SUBNET-PID (id: N)`
                let name = String(line.prefix { $0 != " " })
                let parts = name.split(separator: "-")
                guard name.hasPrefix("dopesync-test-"), parts.count == 4, let subnet = Int(parts[2]),
                    let pid = pid_t(parts[3])
                else { continue }
                if kill(pid, 0) != 0 && errno == ESRCH {
                    await Namespace(name: name, subnet: subnet).remove()
                } else {
                    used.insert(subnet)
                }
            }
            // A link `dspNa` or `dspNd` left without its namespace still holds its name.
            let links = try await runProcess("/usr/sbin/ip", ["-br", "link"]).stdout
            for line in links.split(separator: "\n") where line.hasPrefix("dsp") {
                if let subnet = Int(line.dropFirst(3).prefix { $0.isNumber }) { used.insert(subnet) }
            }
            guard let subnet = (10...250).filter({ !used.contains($0) }).randomElement() else {
                throw POSIXError(.EADDRINUSE)
            }
            return subnet
        }

        /// A namespace for `body`, deleted (with its links) when `body` returns or throws.
        static func with(_ body: (Namespace) async throws -> Void) async throws {
            let namespace = try await make()
            do {
                try await body(namespace)
            } catch {
                await namespace.remove()
                throw error
            }
            await namespace.remove()
        }

        /// Not cancelled with a test past its time limit (``uncancelled(_:)``).
        func remove() async {
            await uncancelled { [name, subnet] in
                _ = try? await Self.ip(["netns", "del", name])  // deletes the veth pairs with it
                for link in ["dsp\(subnet)a", "dsp\(subnet)d"] { _ = try? await Self.ip(["link", "del", link]) }
            }
        }

        static func ip(_ arguments: [String]) async throws {
            _ = try await runProcess("/usr/sbin/ip", arguments)
        }
    }

    @Test(
        "a worker partitioned from PostgreSQL (not from the API) sends nothing once its lease may have run out, exits 75; another host finishes; every record once"
    )
    func partitionedFromTheDatabase() async throws {
        guard geteuid() == 0 else {
            Issue.record("network namespaces need root, which the tests run as")
            return
        }
        try await Namespace.with { namespace in
            let cluster = try await PostgresCluster.start()
            // The database also listens on the namespace's link, with passwords, as on a real network.
            try await cluster.psql("ALTER SYSTEM SET listen_addresses = '127.0.0.1,\(namespace.databaseAddress)'")
            let hba = cluster.folder.appendingPathComponent("data/pg_hba.conf")
            let rules = try String(contentsOf: hba, encoding: .utf8)
            try (rules + "\nhost all all 10.92.\(namespace.subnet).0/24 scram-sha-256\n").write(
                to: hba, atomically: false, encoding: .utf8)
            try await cluster.restart(immediate: false)
            let database = try await SharedDatabase.fresh(in: cluster)

            try await withTemporaryDirectory { directory in
                let samples = (1...6).map { SampleSession(seed: UInt64(4800 + $0), shape: .realistic) }
                let spool = try await makeSpool(in: directory, samples: samples)
                let arrivals = Mutex<[ContinuousClock.Instant]>([])
                let (struck, strike) = AsyncStream.makeStream(of: Void.self)
                var configuration = DevServerConfiguration()
                configuration.host = namespace.apiAddress
                configuration.faults.latencyMilliseconds = 5...10
                configuration.onRequest = { _, path in
                    guard !path.hasPrefix("/admin") else { return }
                    let count = arrivals.withLock { arrivals in
                        arrivals.append(.now)
                        return arrivals.count
                    }
                    if count == 60 { strike.yield() }
                }
                try await withDevServer(configuration) { server in
                    let lease: Duration = .seconds(2)
                    let url =
                        "postgresql://\(PostgresCluster.role)@\(namespace.databaseAddress):\(cluster.port)/\(database.name)"
                    var environment = childEnvironment
                    environment["DOPESYNC_API_TOKEN"] = server.token
                    environment["DOPESYNC_MIN_FREE_SPACE"] = "0"
                    environment["DOPESYNC_HOST"] = "host-a"
                    environment["DOPESYNC_DATABASE_PASSWORD"] = cluster.password
                    let partitioned = try await Spawned(
                        "/usr/sbin/ip",
                        [
                            "netns", "exec", namespace.name, builtProduct("dopesync").path, "run", "--spool",
                            spool.root,
                            "--api", server.baseURL, "--allow-insecure-http", "--min-age", "0", "--progress", "never",
                            "--database", url, "--lease", "2s", "--concurrency", "3",
                        ], environment: environment, errors: .silenced)
                    for await _ in struck { break }
                    let cut = ContinuousClock.now
                    try await Namespace.ip(["link", "set", namespace.databaseLink, "down"])
                    let status = await partitioned.finished()
                    let exited = ContinuousClock.now
                    #expect(status == 75, "a worker that lost its database ends as for one unreachable")
                    // One write waits out the statement limit (10 s by default); the writes after it
                    // (the next result batches, the run's record) ask first whether the database
                    // answers, for 2 s each. Each waited the whole limit before: 40 s to exit.
                    #expect(
                        exited - cut < .seconds(30),
                        "the run settled in \(exited - cut), not within three statement limits")
                    // Its last renewal was asked before the cut: its leases ran out by `cut + lease`
                    // on its own clock. Nothing of it may arrive after that (a little for the wire).
                    let late = arrivals.withLock { $0.filter { $0 > cut + lease + .milliseconds(250) && $0 < exited } }
                    #expect(
                        late.isEmpty, "\(late.count) requests arrived after the partitioned worker's leases ran out")

                    // The dead worker's sessions are ended first, as an operator would. Left alone, its
                    // kernel sends what it still held once the link is up (its last statements, which
                    // the partition dropped), and the database runs them then: fenced, they change
                    // nothing, but a claim row they lock is one a takeover skips (`SKIP LOCKED`)
                    // and asks again for a while (`orphanTakeoverPatience`); past that the bundle
                    // waits for the next run, which this test does not make.
                    let itsSessions = "FROM pg_stat_activity WHERE client_addr = '10.92.\(namespace.subnet).2'"
                    _ = try await database.psql("SELECT pg_terminate_backend(pid) \(itsSessions)")
                    // Signalled, not yet gone: until they have ended.
                    try await waitUntil(
                        database, "the partitioned worker's sessions ended",
                        "SELECT NOT EXISTS (SELECT 1 \(itsSessions))")
                    try await Namespace.ip(["link", "set", namespace.databaseLink, "up"])
                    try await waitUntilEveryLeaseHasRunOut(database)
                    let other = try await spawnSharedRun(
                        spool, against: server, database: database, host: "host-b",
                        ["--allow-insecure-http", "--log-level", "debug"])
                    #expect(await other.finished() == 0, "\(other.errorText)")
                    let left = try spool.names(.processing)
                    if !left.isEmpty {
                        let claims = try await database.psql(
                            "SELECT bundle_name, epoch, run_id, host, lease_expires_at FROM dopesync.claims")
                        Issue.record("left in processing/: \(left)\nclaims:\n\(claims)\nhost-b:\n\(other.errorText)")
                    }
                    try await expectAllSyncedOnce(samples, spool: spool, server: server)
                }
            }
        }
    }
}
