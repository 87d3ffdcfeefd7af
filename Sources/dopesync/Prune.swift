import ArgumentParser
import DopeSync

struct Prune: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Delete bundles that reached done/ more than DURATION ago, and their checkpoint rows.",
        discussion: """
            Only done/ is touched. A bundle's age is from when the checkpoint database recorded it done \
            (its mtime when the database does not know it). Exit 0, or 73 when done/ \
            cannot be read or a file cannot be deleted.
            """
    )

    @Option(help: "Delete what has been in done/ longer than this (e.g. 30d, 12h).", transform: parseDuration)
    var olderThan: Duration

    @OptionGroup var spool: SpoolOption

    func run() async throws {
        try finish(PruneCommand.run(spoolRoot: try spool.resolved(), olderThan: olderThan))
    }
}
