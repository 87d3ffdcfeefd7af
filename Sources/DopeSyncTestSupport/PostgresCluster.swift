import CSystemCalls
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A throwaway PostgreSQL server: its own cluster in a temporary folder, on a free port of
/// 127.0.0.1, with a `dopesync` role that logs in with a password over TCP (scram-sha-256) and a
/// `dopesync` database it owns. Each suite (or test) starts its own.
///
/// The programs are Debian's (`/usr/lib/postgresql/VERSION/bin`, the highest version; `make deps`
/// installs them); they run as the `postgres` account when this process is root, since `initdb`
/// refuses root. `remove()`, or the end of the object, stops the server and deletes the folder; if
/// this process dies first, a watchdog child process does it.
///
/// Its calls are awaited (a start takes about a second): the programs run through `runProcess`,
/// which holds no thread of the cooperative pool. `remove()` waits for the watchdog to have stopped
/// the server; the end of the object only tells the watchdog to, as this process's end would.
public final class PostgresCluster: Sendable {
    public static let role = "dopesync"
    public static let database = "dopesync"

    /// The server's TCP port on 127.0.0.1.
    public let port: Int
    /// The `dopesync` role's password: 32 random hex digits.
    public let password: String

    private let server: ClusterServer
    private let watchdog: Spawned
    private let removed = Mutex(false)

    /// The cluster's own folder (mode 0700): `data/`, the server's log `server.log`, its Unix socket.
    public var folder: URL { server.folder }

    /// `postgresql://dopesync@127.0.0.1:PORT/dopesync`, without the password.
    public var url: String { "postgresql://\(Self.role)@127.0.0.1:\(port)/\(Self.database)" }

    /// The running server's process id (its postmaster's), from `data/postmaster.pid`; nil when stopped.
    public var postmasterPID: pid_t? { server.postmasterPID }

    /// The `psql` program, for a test's own connections (over TCP as `dopesync`, say).
    public var psqlProgram: String { server.programs.psql }

    private init(server: ClusterServer, watchdog: Spawned, port: Int, password: String) {
        self.server = server
        self.watchdog = watchdog
        self.port = port
        self.password = password
    }

    deinit { server.abandon(watchdog: watchdog) }

    /// Makes a cluster, starts its server and creates the `dopesync` role and database.
    ///
    /// `installations` holds one folder per PostgreSQL version (Debian's layout); without one
    /// holding `initdb`, this throws an error that says to run `make deps`.
    public static func start(installations: String = "/usr/lib/postgresql") async throws -> PostgresCluster {
        let programs = try PostgresPrograms.find(under: installations)
        let server = ClusterServer(folder: try makeTemporaryDirectory("dopesync-pg"), programs: programs)
        let watchdog: Spawned
        do {
            try server.makeFolderPrivate()
            watchdog = try await server.startWatchdog()
        } catch {
            try? FileManager.default.removeItem(at: server.folder)
            throw error
        }
        do {
            try await server.initialize()
            let port = try await server.startOnUnusedPort()
            let cluster = PostgresCluster(server: server, watchdog: watchdog, port: port, password: randomPassword())
            try await cluster.psql(
                """
                CREATE ROLE \(role) LOGIN PASSWORD '\(cluster.password)';
                CREATE DATABASE \(database) OWNER \(role);
                """,
                database: "postgres")
            return cluster
        } catch {
            await server.remove(watchdog: watchdog)
            throw error
        }
    }

    /// Runs `sql` as the superuser over the cluster's Unix socket (`psql -X -q -A -t -v
    /// ON_ERROR_STOP=1`) and returns what it printed: one line a row, `|` between columns, no
    /// command tags, without the last newline. The first failing statement throws.
    @discardableResult
    public func psql(_ sql: String, database: String = PostgresCluster.database) async throws -> String {
        do {
            let output = try await runProcess(
                psqlProgram, psqlArguments(database) + ["-f", "-"], stdin: Data(sql.utf8))
            var text = output.stdout
            while text.hasSuffix("\n") { text.removeLast() }
            return text
        } catch let failure as ProcessFailure {
            throw PostgresClusterError("\(failure)\nSQL: \(sql)")
        }
    }

    /// A `psql` session the test feeds statement by statement through its standard input
    /// (``Spawned/input``), for a transaction held open across the test's own steps: a lock it
    /// lets go of when the test says. Its output is discarded.
    public func session(database: String = PostgresCluster.database) async throws -> Spawned {
        try await Spawned(psqlProgram, psqlArguments(database) + ["-o", "/dev/null"], errors: .silenced)
    }

    /// psql as the superuser on `database`, without a startup file, printing bare rows and
    /// stopping at the first error.
    private func psqlArguments(_ database: String) -> [String] {
        [
            "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", folder.path, "-p", String(port), "-U", "postgres",
            "-d", database,
        ]
    }

    /// Writes `password` and a newline to a new file of mode 0600 (`password` in `directory`, by
    /// default the cluster's folder), this process's user's; returns its path.
    @discardableResult
    public func writePasswordFile(in directory: URL? = nil) throws -> String {
        let path = (directory ?? folder).appendingPathComponent("password").path
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw PostgresClusterError(failedCall: "open \(path)") }
        let file = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        // A file that was there keeps its mode through O_CREAT: set it.
        guard fchmod(descriptor, 0o600) == 0 else { throw PostgresClusterError(failedCall: "chmod 0600 \(path)") }
        try file.write(contentsOf: Data((password + "\n").utf8))
        return path
    }

    /// Stops the server (`pg_ctl stop -w`): `immediate` kills it as a crash would (the next start
    /// recovers from the WAL), otherwise its sessions are ended and it shuts down cleanly.
    public func stop(immediate: Bool) async throws {
        try await server.pgCtl(["stop", "-m", immediate ? "immediate" : "fast"])
    }

    /// Starts the stopped server again, on the same port (`pg_ctl start -w`: it accepts connections
    /// when this returns).
    public func start() async throws {
        try await server.pgCtl(["start", "-l", server.log.path])
    }

    /// `stop(immediate:)` then `start()`, in one `pg_ctl restart -w`.
    public func restart(immediate: Bool) async throws {
        try await server.pgCtl(["restart", "-m", immediate ? "immediate" : "fast", "-l", server.log.path])
    }

    /// Ends every session of `user` (a lost database connection, as the client sees it); returns
    /// how many. They are gone when this returns: `pg_terminate_backend` waits for each to end.
    @discardableResult
    public func terminateConnections(of user: String) async throws -> Int {
        let name = "'" + user.replacingOccurrences(of: "'", with: "''") + "'"
        // In FILTER, not WHERE: WHERE's conditions may be evaluated in any order, and a terminate
        // evaluated before the user test would end other users' sessions.
        let ended = try await psql(
            """
            SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
            WHERE usename = \(name) AND pid <> pg_backend_pid()
            """,
            database: "postgres")
        guard let count = Int(ended) else { throw PostgresClusterError("terminating \(user)'s sessions: \(ended)") }
        return count
    }

    /// Stops the server at once and deletes the folder: nothing of the cluster is left, no process
    /// and no file. A second call does nothing. The watchdog does both, asked as if this process
    /// had died; this waits for it.
    public func remove() async {
        let first = removed.withLock { removed in
            defer { removed = true }
            return !removed
        }
        if first { await server.remove(watchdog: watchdog) }
    }
}

/// A cluster's folder and the programs that run its server.
private struct ClusterServer: Sendable {
    let folder: URL
    let programs: PostgresPrograms

    var data: URL { folder.appendingPathComponent("data") }
    var log: URL { folder.appendingPathComponent("server.log") }

    /// The postmaster's process id, the first line of `data/postmaster.pid`; nil when it is not running.
    var postmasterPID: pid_t? {
        guard let contents = FileManager.default.contents(atPath: data.appendingPathComponent("postmaster.pid").path)
        else { return nil }
        return String(decoding: contents, as: UTF8.self).split(separator: "\n").first.flatMap { pid_t($0) }
    }

    /// Mode 0700, and the server account's.
    func makeFolderPrivate() throws {
        guard chmod(folder.path, 0o700) == 0 else {
            throw PostgresClusterError(failedCall: "chmod 0700 \(folder.path)")
        }
        try programs.handOver(folder.path)
    }

    /// `initdb`: the C locale whatever this machine's is, UTF-8, the superuser `postgres`, trusted
    /// over the Unix socket (which only this folder's owner can reach) and a SCRAM password over TCP.
    /// `--no-sync` skips initdb's own final flush to disk (a fifth of its time), which only an
    /// operating system crash would miss; the server itself keeps fsync on.
    func initialize() async throws {
        try await programs.runServerProgram(
            "initdb",
            [
                "-D", data.path, "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256",
                "--no-locale", "-E", "UTF8", "--no-instructions", "--no-sync",
            ],
            in: folder)
        // The settings that change with each attempt to start (the port) go in a file of their
        // own, which postgresql.conf includes.
        let postgresqlConf = try FileHandle(forWritingTo: data.appendingPathComponent("postgresql.conf"))
        try postgresqlConf.seekToEnd()
        try postgresqlConf.write(contentsOf: Data("\ninclude 'throwaway.conf'\n".utf8))
        try postgresqlConf.close()
    }

    /// How many ports a start tries before it gives up: each lost race is another suite's start.
    private static let portAttempts = 8

    /// Starts the server on a port found free by binding port 0 and letting it go. Another process
    /// (a suite starting its own cluster meanwhile) may take that port first, so a start that
    /// could not bind is tried again on another.
    func startOnUnusedPort() async throws -> Int {
        let throwawayConf = data.appendingPathComponent("throwaway.conf")
        var attempt = 1
        while true {
            let port = try unusedLoopbackPort()
            // fsync stays on and synchronous_commit at its default: the restart tests rely on a
            // commit surviving an immediate stop.
            let settings = """
                # A throwaway cluster for dopesync's tests (PostgresCluster): loopback only, its socket in its folder.
                listen_addresses = '127.0.0.1'
                port = \(port)
                unix_socket_directories = '\(folder.path)'
                max_connections = 200

                """
            try Data(settings.utf8).write(to: throwawayConf)
            try programs.handOver(throwawayConf.path)
            do {
                try await pgCtl(["start", "-l", log.path])
                return port
            } catch let error as PostgresClusterError
                where error.serverLog.contains("Address already in use") && attempt < Self.portAttempts
            {
                attempt += 1
            }
        }
    }

    /// Runs `pg_ctl ARGUMENTS -D data -w`; a failure carries what the server logged meanwhile.
    func pgCtl(_ arguments: [String]) async throws {
        let logged = (try? FileManager.default.attributesOfItem(atPath: log.path)[.size] as? Int) ?? 0
        do {
            try await programs.runServerProgram("pg_ctl", arguments + ["-D", data.path, "-w"], in: folder)
        } catch let failure as ProcessFailure {
            let contents = FileManager.default.contents(atPath: log.path) ?? Data()
            throw PostgresClusterError(
                failure.description, serverLog: String(decoding: contents.dropFirst(logged), as: UTF8.self))
        }
    }

    /// Has the watchdog stop the server if it runs (`pg_ctl stop -m immediate`) and delete the
    /// folder, by closing its input, and waits for it and for the server to end.
    func remove(watchdog: Spawned) async {
        let postmaster = postmasterPID
        try? watchdog.input.close()
        // Not cancelled with a test past its time limit: the watchdog must stop the server and
        // delete the folder.
        let stopped = await uncancelled { await watchdog.finished() } == 0
        guard let postmaster else { return }
        // A pid file left by a server that died may name another process by now.
        if !stopped && processName(postmaster) == "postgres" { kill(postmaster, SIGKILL) }
        _ = await processEnds(postmaster)
    }

    /// Has the watchdog stop the server and delete the folder, as this process's end would, without
    /// waiting for it: what the end of a cluster object does, which cannot wait.
    func abandon(watchdog: Spawned) {
        try? watchdog.input.close()
    }

    /// A child that stops the server (if its pid file is there) and deletes the folder once its
    /// standard input closes: when `remove()` closes it, or when this process dies, however it
    /// dies; it exits with `pg_ctl stop`'s status. It ignores the terminal's signals, which reach
    /// it with the test process on ^C. It keeps this process's standard error, for its own errors
    /// and so that whoever reads this process's output to its end also waits for its cleanup.
    func startWatchdog() async throws -> Spawned {
        let script =
            PostgresPrograms.withoutInheritedDescriptors + """
                trap '' INT QUIT HUP TERM
                exec >/dev/null
                while read -r _; do :; done
                folder=$1
                shift
                [ -d "$folder" ] || exit 0
                status=0
                if [ -e "$folder/data/postmaster.pid" ]; then "$@" || status=$?; fi
                rm -rf "$folder"
                exit $status
                """
        let stop = programs.serverCommand("pg_ctl", ["stop", "-D", data.path, "-m", "immediate", "-w"])
        // In the folder: the server's account may not be allowed into this process's working folder.
        return try await Spawned(
            "/bin/bash", ["-c", script, "postgres-cluster-watchdog", folder.path] + stop, in: folder)
    }
}

/// Whether process `pid` (not a child of this one: nothing to wait for) has ended, or ends within
/// `limit`. `pg_ctl stop -w` returns once the postmaster has deleted its pid file, its last act
/// before it exits: this waits out that last moment (a millisecond or so). The postmaster is
/// pg_ctl's child, adopted by init, so no exit status of it ever reaches this process.
/// Waits on a pidfd, which polls readable at the process's end, on a thread of its own.
public func processEnds(_ pid: pid_t, within limit: Duration = .seconds(5)) async -> Bool {
    let descriptor = dopesync_pidfd_open(pid)
    guard descriptor >= 0 else { return errno == ESRCH }  // no such process: it has ended
    defer { close(descriptor) }
    let milliseconds = Int32(limit / .milliseconds(1))
    return await onOwnThread {
        var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        var ready: Int32
        repeat { ready = poll(&entry, 1, milliseconds) } while ready < 0 && errno == EINTR
        return ready == 1
    }
}

/// Whether process `pid` exists and has not ended (a zombie has ended: only its exit status is left).
public func processIsRunning(_ pid: pid_t) -> Bool {
    guard let stat = FileManager.default.contents(atPath: "/proc/\(pid)/stat") else { return false }
    // `PID (NAME) STATE …`, and NAME may hold anything, parentheses too: the state follows the last `)`.
    guard let close = stat.lastIndex(of: UInt8(ascii: ")")), close + 2 < stat.endIndex else { return false }
    let state = stat[close + 2]
    return state != UInt8(ascii: "Z") && state != UInt8(ascii: "X")
}

/// The name of process `pid`'s program (`/proc/PID/comm`), nil if there is no such process.
private func processName(_ pid: pid_t) -> String? {
    FileManager.default.contents(atPath: "/proc/\(pid)/comm").map {
        String(decoding: $0, as: UTF8.self).trimmingCharacters(in: .newlines)
    }
}

/// 32 random hex digits (from the system's secure generator).
private func randomPassword() -> String {
    var generator = SystemRandomNumberGenerator()
    return (0..<16).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max, using: &generator)) }.joined()
}

/// A TCP port of 127.0.0.1 that nothing is bound to now: the kernel's pick for port 0, let go.
private func unusedLoopbackPort() throws -> Int {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw PostgresClusterError(failedCall: "socket") }
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = in_addr_t(INADDR_LOOPBACK).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
            bind(descriptor, generic, length) == 0 && getsockname(descriptor, generic, &length) == 0
        }
    }
    guard bound else { throw PostgresClusterError(failedCall: "binding 127.0.0.1:0") }
    return Int(UInt16(bigEndian: address.sin_port))
}
