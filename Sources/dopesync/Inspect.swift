import ArgumentParser
import DopeSync

struct Inspect: AsyncParsableCommand {
    static let configuration = InspectOptions.configuration

    @OptionGroup var options: InspectOptions

    @Option(
        help: ArgumentHelp(
            "Read progress from the PostgreSQL database the spool's hosts share instead, "
                + "postgresql://USER@HOST:PORT/DATABASE (password: DOPESYNC_DATABASE_PASSWORD)."))
    var database: String?

    func run() async throws {
        // Only when asked on the command line: a child `inspect` reading a suspect bundle for a
        // run must not open a connection because the run's environment names the database.
        let shared = try database.flatMap { url in
            try resolveSettings(commandLine: [.database: url], job: nil, purpose: .spoolOnly).database
        }
        try await InspectCommand.run(
            bundlePath: options.bundle, json: options.json, databasePath: options.databasePath, database: shared
        ).printAndExit()
    }
}
