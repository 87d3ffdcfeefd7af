import ArgumentParser
import DopeSync
import Foundation

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the spool: counts per folder, bundles waiting for retry, failures, claims, the last run.",
        discussion: """
            Reads only: opens no bundle and writes nothing. Incoming bundles are due now, waiting for retry \
            (the next attempt is in the checkpoint database), or modified within min-age (--job's, else 5s). \
            A claim whose owner is dead is an orphan the next run takes back. \
            Exit 0; 73 when the spool or the database cannot be read; 75 when the shared database (database:) cannot be reached; 78 when it refuses the credentials.
            """
    )

    @OptionGroup var spool: SpoolOption

    @Flag(help: "Print one JSON document (stable field names) instead of text.")
    var json = false

    @Option(help: "Also list the last N runs from the checkpoint database, newest first.")
    var runs: Int = 0

    @Option(
        help: ArgumentHelp(
            "The API runs are given (default: --job's `api:`, $DOPESYNC_API_URL): bundles whose checkpoints were "
                + "recorded against another API are named."))
    var api: String?

    func run() async throws {
        let settings = try spool.settings()
        try await StatusCommand.run(
            spoolRoot: settings.spool, json: json, minAge: settings.minAge, minFreeSpace: settings.minFreeSpace,
            runs: runs, database: settings.database,
            apiURL: api ?? (settings.apiURL.isEmpty ? nil : settings.apiURL)
        ).printAndExit()
    }
}
