import ArgumentParser
import DopeSync

struct Prune: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Delete bundles that reached done/ more than DURATION ago, and their checkpoint rows.",
        discussion: """
            Only done/ is touched. A bundle's age is from when the checkpoint database recorded it done \
            (its mtime when the database does not know it). Without --older-than, the job file's \
            prune-after (default 30d), as the package's prune timer runs it. Exit 0, or 73 when done/ \
            cannot be read or a file cannot be deleted.
            """
    )

    @Option(
        help: "Delete what has been in done/ longer than this (e.g. 30d, 12h); default: prune-after, 30d.",
        transform: parseDuration)
    var olderThan: Duration?

    @OptionGroup var spool: SpoolOption

    func run() async throws {
        let settings = try spool.settings()
        try finish(
            await PruneCommand.run(
                spoolRoot: settings.spool, olderThan: olderThan ?? settings.pruneAfter, database: settings.database))
    }
}
