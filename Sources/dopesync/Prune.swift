import ArgumentParser
import DopeSync

struct Prune: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Delete bundles that reached done/ more than DURATION ago, and their checkpoint rows.",
        discussion: """
            Only done/ is touched. A bundle's age is from when the checkpoint database recorded it done \
            (its mtime when the database does not know it). Without --older-than, the job file's \
            prune-after (default 30d), as the package's prune timer runs it. Exit 0, or 73 when done/ \
            cannot be read or a file cannot be deleted; 75 when the shared database (database:) cannot be reached; 78 when it refuses the credentials.
            """
    )

    @Option(
        help: ArgumentHelp(
            "Delete what has been in done/ longer than this (e.g. 30d, 12h); above zero, as prune-after; "
                + "default: prune-after, 30d."),
        transform: parseDuration)
    var olderThan: Duration?

    func validate() throws {
        // One rule for zero, as `prune-after` has it: 0 would delete every bundle of done/ at once.
        if let olderThan, olderThan <= .zero {
            throw ValidationError(
                "--older-than must be above zero, as prune-after must: 0 would delete every bundle in done/ "
                    + "(1s deletes all but those done in the last second)")
        }
    }

    @OptionGroup var spool: SpoolOption

    func run() async throws {
        let settings = try spool.settings()
        try await PruneCommand.run(
            spoolRoot: settings.spool, olderThan: olderThan ?? settings.pruneAfter, database: settings.database
        ).printAndExit()
    }
}
