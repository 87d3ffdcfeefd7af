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

    static func main() async {
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        await main(nil)
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
