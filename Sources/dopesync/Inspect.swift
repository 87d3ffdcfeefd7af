import ArgumentParser
import DopeSync

struct Inspect: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Validate a bundle without uploading it and show what it holds.",
        discussion: """
            Exit 0 for a valid bundle, 65 with every reason for an invalid one. When the spool's checkpoint \
            database knows the session, the steps already uploaded are listed with their server ids, and the ids \
            its records still to upload name that the server's reference lists (as the last run kept them) do not hold.
            """
    )

    @Argument(help: "The bundle file (tar or zip, any supported compression).")
    var bundle: String

    @Flag(help: "Print one JSON document instead of text.")
    var json = false

    @Option(
        help: "The spool whose checkpoint database (SPOOL/dopesync.sqlite) is read for progress and reference lists.")
    var spool = "./spool"

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
        try finish(
            await InspectCommand.run(
                bundlePath: bundle, json: json, databasePath: Spool(root: spool).databasePath, database: shared))
    }
}
