import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The throwaway PostgreSQL server the checkpoint store's tests run against: a real server, with
/// password logins over TCP, that survives a crash with its commits and leaves nothing behind.
@Suite struct PostgresClusterTests {
    static let environment = ProcessInfo.processInfo.environment
    static let isChild = environment["DOPESYNC_TEST_CHILD"] == "postgres-cluster"

    /// `SELECT current_user` over TCP as `dopesync`, with `password` (PGPASSWORD).
    static func currentUserOverTCP(_ cluster: PostgresCluster, password: String) async throws -> ProcessOutput {
        try await runProcess(
            cluster.psqlProgram, ["-X", "-A", "-t", "-c", "SELECT current_user", cluster.url],
            environment: ["PGPASSWORD": password], allowFailure: true)
    }

    @Test(.enabled(if: !isChild)) func dopesyncLogsInOverTCPWithItsPasswordOnly() async throws {
        let cluster = try await PostgresCluster.start()
        #expect(cluster.url == "postgresql://dopesync@127.0.0.1:\(cluster.port)/dopesync")

        let passwordFile = try cluster.writePasswordFile()
        let attributes = try FileManager.default.attributesOfItem(atPath: passwordFile)
        #expect(attributes[.posixPermissions] as? Int == 0o600)
        let written = try String(contentsOfFile: passwordFile, encoding: .utf8)
        #expect(written == cluster.password + "\n")

        let right = try await Self.currentUserOverTCP(cluster, password: cluster.password)
        #expect(right.status == 0, "\(right.stderr)")
        #expect(right.stdout == "dopesync\n")
        let wrong = try await Self.currentUserOverTCP(cluster, password: cluster.password + "x")
        #expect(wrong.status != 0)
        #expect(wrong.stderr.contains("password authentication failed for user \"dopesync\""))
        // The password is kept as a SCRAM verifier, so the login above was a SCRAM exchange.
        let stored = try await cluster.psql("SELECT left(rolpassword, 14) FROM pg_authid WHERE rolname = 'dopesync'")
        #expect(stored == "SCRAM-SHA-256$")
        #expect(
            try await cluster.psql(
                "SELECT pg_catalog.pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'dopesync'")
                == "dopesync")
    }

    @Test(.enabled(if: !isChild)) func committedRowsSurviveAnImmediateRestartAndAStop() async throws {
        let cluster = try await PostgresCluster.start()
        try await cluster.psql(
            "CREATE TABLE checkpoints (step text PRIMARY KEY); INSERT INTO checkpoints VALUES ('dope:1');")
        let before = cluster.postmasterPID

        try await cluster.restart(immediate: true)
        #expect(cluster.postmasterPID != before)
        #expect(try await cluster.psql("SELECT step FROM checkpoints") == "dope:1")

        try await cluster.psql("INSERT INTO checkpoints VALUES ('dope:2')")
        try await cluster.stop(immediate: true)
        #expect(cluster.postmasterPID == nil)
        await #expect(throws: PostgresClusterError.self) { try await cluster.psql("SELECT 1") }
        try await cluster.start()
        #expect(
            try await cluster.psql("SELECT string_agg(step, ',' ORDER BY step) FROM checkpoints") == "dope:1,dope:2")
        #expect(try await Self.currentUserOverTCP(cluster, password: cluster.password).stdout == "dopesync\n")
    }

    @Test(.enabled(if: !isChild)) func terminatingAUsersConnectionsEndsItsSessions() async throws {
        let cluster = try await PostgresCluster.start()
        var environment = childEnvironment
        environment["PGPASSWORD"] = cluster.password
        let session = try await Spawned(
            cluster.psqlProgram, ["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", cluster.url], environment: environment,
            errors: .silenced)
        try session.send("SELECT 'connected';")
        #expect(session.output.readLine() == "connected")

        #expect(try await cluster.terminateConnections(of: "dopesync") == 1)
        #expect(try await cluster.psql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'dopesync'") == "0")
        try session.send("SELECT 1;")
        try session.input.close()
        #expect(await session.finished() == 2)  // psql's "connection to server was lost"
        #expect(try await cluster.terminateConnections(of: "dopesync") == 0)
    }

    @Test(.enabled(if: !isChild)) func removeLeavesNoServerAndNoFolder() async throws {
        let cluster = try await PostgresCluster.start()
        let postmaster = try #require(cluster.postmasterPID)
        #expect(processIsRunning(postmaster))

        await cluster.remove()
        #expect(!processIsRunning(postmaster))
        #expect(!FileManager.default.fileExists(atPath: cluster.folder.path))
        await cluster.remove()
    }

    /// A test process that dies without `remove()`: its cluster's watchdog stops the server and
    /// deletes the folder. The watchdog holds the child's standard error until it is done, so the
    /// child's error output ends when the cleanup has. It is read here to its end: swift-subprocess
    /// (`runProcess`) stops reading once the child itself has exited, before the watchdog is done.
    /// Read as it comes, from the start (a full pipe would stop the child), and within the time
    /// limit (a watchdog that never ends fails the test instead of holding it).
    @Test(.enabled(if: !isChild), .timeLimit(minutes: 3))
    func aClusterWhoseProcessDiesIsRemovedByItsWatchdog() async throws {
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let child = try await Spawned(
            executable, ["--testing-library", "swift-testing", "--filter", "PostgresClusterTests/child"],
            environment: childEnvironment.merging(["DOPESYNC_TEST_CHILD": "postgres-cluster"]) {
                $1
            },
            errors: .piped)
        let errorLines = try #require(child.errors).lines()
        let line = await child.firstLine(containing: "cluster ")
        var errorOutput = ""
        for await errorLine in errorLines { errorOutput += errorLine + "\n" }
        try #require(!Task.isCancelled, "the watchdog did not end within the time limit")
        let fields = try #require(line, "the child said nothing of its cluster: \(errorOutput)").split(separator: " ")
        let folder = String(fields[1])
        let postmaster = try #require(pid_t(fields[2]))

        #expect(await child.finished() == 128 + SIGKILL, "\(errorOutput)")
        #expect(await processEnds(postmaster))
        #expect(!FileManager.default.fileExists(atPath: folder))
    }

    /// The child's side of the test above: starts a cluster, says where it is, and dies.
    @Test(.enabled(if: isChild)) func child() async throws {
        let cluster = try await PostgresCluster.start()
        let line = "cluster \(cluster.folder.path) \(try #require(cluster.postmasterPID))\n"
        try FileHandle.standardOutput.write(contentsOf: Data(line.utf8))  // unbuffered: the kill comes next
        kill(getpid(), SIGKILL)
    }

    /// `processEnds`, which the test above and `remove()` wait with: not while the process runs,
    /// at once when it has ended.
    @Test(.enabled(if: !isChild)) func processEndsWhenTheProcessHasEnded() async throws {
        let running = try await Spawned("/bin/cat", [])
        #expect(await !processEnds(running.pid, within: .milliseconds(50)))
        try running.input.close()  // cat ends at the end of its input
        #expect(await processEnds(running.pid))
        _ = await running.finished()
    }

    @Test(.enabled(if: !isChild)) func withoutPostgreSQLTheErrorSaysToRunMakeDeps() async throws {
        let folder = try TemporaryFolder("no-postgresql")
        let error = await #expect(throws: PostgresClusterError.self) {
            try await PostgresCluster.start(installations: folder.path)
        }
        #expect(error?.description.contains("run `make deps`") == true)
    }
}
