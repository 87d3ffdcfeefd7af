import ArgumentParser
import DopeSyncBundleCommands

@main
struct DopeSyncBundleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dopesync-bundle",
        abstract:
            "The bundle half of dopesync, for producers: check and pack bundles without the worker's HTTP and PostgreSQL.",
        version: DopeSyncInfo.version,
        subcommands: [Inspect.self, Pack.self]
    )
}

/// `dopesync inspect` without `--database`: progress only from the spool's own file.
struct Inspect: AsyncParsableCommand {
    static let configuration = InspectOptions.configuration

    @OptionGroup var options: InspectOptions

    func run() async throws {
        try await InspectCommand.run(
            bundlePath: options.bundle, json: options.json, databasePath: options.databasePath
        ).printAndExit()
    }
}
