import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Where Debian's PostgreSQL programs are, and which account runs the server's.
///
/// `initdb` refuses to run as root, and the tests (and CI) run as root: then the server's programs
/// run as the `postgres` account the package creates (through `runuser`), and its folder is that
/// account's. Any other user runs them as itself.
struct PostgresPrograms: Sendable {
    /// The account that runs `initdb`, `pg_ctl` and the server, when it is not this process's user.
    struct ServerAccount: Sendable {
        static let name = "postgres"
        let uid: uid_t
        let gid: gid_t
    }

    /// The folder of the server's programs (`initdb`, `pg_ctl`): `/usr/lib/postgresql/VERSION/bin`.
    let serverBin: String
    /// `psql`, of the highest version installed (postgresql-client).
    let psql: String
    let serverAccount: ServerAccount?

    static let runuser = "/usr/sbin/runuser"

    /// The highest version under `root` that has the server's programs, and `psql`.
    static func find(under root: String) throws -> PostgresPrograms {
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        func binary(_ name: String) -> String? {
            versions.sorted { $0.compare($1, options: .numeric) == .orderedDescending }
                .map { "\(root)/\($0)/bin/\(name)" }
                .first { FileManager.default.isExecutableFile(atPath: $0) }
        }
        guard let initdb = binary("initdb"), let psql = binary("psql") else {
            throw PostgresClusterError(
                "PostgreSQL is not installed (no \(root)/*/bin/initdb or psql): run `make deps`, which installs "
                    + "postgresql and postgresql-client")
        }
        let serverBin = (initdb as NSString).deletingLastPathComponent
        guard FileManager.default.isExecutableFile(atPath: serverBin + "/pg_ctl") else {
            throw PostgresClusterError("\(serverBin) has initdb but no pg_ctl: run `make deps`")
        }
        return PostgresPrograms(serverBin: serverBin, psql: psql, serverAccount: try serverAccountIfRoot())
    }

    private static func serverAccountIfRoot() throws -> ServerAccount? {
        guard getuid() == 0 else { return nil }
        guard let entry = getpwnam(ServerAccount.name) else {
            throw PostgresClusterError(
                "running as root, PostgreSQL's programs must run as the \(ServerAccount.name) account, "
                    + "which does not exist: run `make deps`, which installs postgresql")
        }
        guard FileManager.default.isExecutableFile(atPath: runuser) else {
            throw PostgresClusterError("running as root, \(runuser) is needed to run initdb as \(ServerAccount.name)")
        }
        return ServerAccount(uid: entry.pointee.pw_uid, gid: entry.pointee.pw_gid)
    }

    /// The command line that runs the server's program `name` as the server's account.
    func serverCommand(_ name: String, _ arguments: [String]) -> [String] {
        let program = "\(serverBin)/\(name)"
        guard serverAccount != nil else { return [program] + arguments }
        return [Self.runuser, "-u", ServerAccount.name, "--", program] + arguments
    }

    /// Runs the server's program `name` to its end, in `folder` (the server's account may not be
    /// allowed into this process's working folder), through bash and `withoutInheritedDescriptors`:
    /// the server that `pg_ctl start` leaves running holds none of this process's pipes.
    @discardableResult
    func runServerProgram(_ name: String, _ arguments: [String], in folder: URL) async throws -> ProcessOutput {
        let command = serverCommand(name, arguments)
        let script = Self.withoutInheritedDescriptors + "exec \"$@\"\n"
        let output = try await runProcess("/bin/bash", ["-c", script, name] + command, in: folder, allowFailure: true)
        guard output.status == 0 else { throw ProcessFailure(command: command, output: output) }
        return output
    }

    /// The start of a bash script that closes every descriptor it inherited beyond the standard
    /// three, for the children that live as long as the suite (the server, the watchdog): a pipe
    /// one of them kept would keep the test reading it waiting for its end. ``Spawned`` closes them
    /// already (``ChildProcess``); this holds for a server that `pg_ctl` starts, whatever started it.
    /// (No redirection on the loop: bash would keep the saved descriptor above 2, the loop would
    /// close it, and the redirection could not be undone.)
    static let withoutInheritedDescriptors = """
        for descriptor in /proc/$$/fd/*; do
          number=${descriptor##*/}
          if [ "$number" -gt 2 ]; then exec {number}>&-; fi
        done

        """

    /// Makes `path` the server account's (when that is another account than this process's).
    func handOver(_ path: String) throws {
        guard let serverAccount else { return }
        guard chown(path, serverAccount.uid, serverAccount.gid) == 0 else {
            throw PostgresClusterError(failedCall: "chown \(ServerAccount.name) \(path)")
        }
    }
}

/// A throwaway cluster could not be made, started, stopped or queried; the message names the
/// command and carries what it printed (and the server's log, when the server is what failed).
public struct PostgresClusterError: Error, CustomStringConvertible, Sendable {
    public let message: String
    /// What the server logged while the failing `pg_ctl` ran (empty for other failures).
    public let serverLog: String

    init(_ message: String, serverLog: String = "") {
        self.message = message
        self.serverLog = serverLog
    }

    /// A system call that failed, and `errno`'s explanation.
    init(failedCall call: String) {
        self.init("\(call): \(String(cString: strerror(errno)))")
    }

    public var description: String { serverLog.isEmpty ? message : "\(message)\nserver log:\n\(serverLog)" }
}
