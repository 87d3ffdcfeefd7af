import ArgumentParser
import DopeSync
import Foundation
import NIOCore
import NIOPosix

@main
struct DopeSyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dopesync",
        abstract: "Upload offline range-session bundles from a spool to the TrueDope API.",
        version: DopeSyncInfo.version,
        subcommands: [
            Run.self, Check.self, Status.self, Inspect.self, Requeue.self, Pack.self, Prune.self, Migrate.self,
        ]
    )

    /// `run` on NIO's event loops as Swift's global executor: a bundle's task resumes on the loop
    /// where its answer arrived, without a hop to another thread (ARCHITECTURE.md, "Threads"). The
    /// other commands are a few calls into SQLite or libarchive on the cooperative pool, where a
    /// blocking call may run (`BlockingCalls`). `DOPESYNC_EXECUTOR=cooperative` leaves `run` there
    /// too, for measuring the choice again (BENCHMARKS.md, "2026-11-26 The executor once nothing
    /// blocks a loop"); the library is correct under either.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if command is Run && ProcessInfo.processInfo.environment["DOPESYNC_EXECUTOR"] != "cooperative" {
                NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
            }
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}

/// Prints what a library command said and ends the process with its status.
func finish(_ outcome: CommandOutcome) throws {
    if !outcome.output.isEmpty { print(outcome.output) }
    if let diagnostics = outcome.diagnostics {
        FileHandle.standardError.write(Data((diagnostics + "\n").utf8))
    }
    if outcome.status != .success { throw ExitCode(outcome.status.rawValue) }
}
