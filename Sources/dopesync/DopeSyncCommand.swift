import ArgumentParser
import DopeSync

@main
struct DopeSyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dopesync",
        abstract: "Upload offline range-session bundles from a spool to the TrueDope API.",
        version: DopeSyncInfo.version,
        subcommands: [
            Run.self, Check.self, Status.self, Inspect.self, Requeue.self, Pack.self, Prune.self, Migrate.self,
            API.self,
        ]
    )

    /// `run` with NIO's event loops as the global executor too (``UploadExecutor``), so that what
    /// its libraries start outside the run's tasks lands there. The other commands are a few calls
    /// into SQLite or libarchive on the cooperative pool, where a blocking call may run
    /// (`BlockingCalls`).
    static func main() async {
        do {
            var command = try parseAsRoot()
            if command is Run { UploadExecutor.install() }
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
