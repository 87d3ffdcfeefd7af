import ArgumentParser
import DopeSync

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy the spool's SQLite checkpoints into the PostgreSQL database several hosts will share.",
        discussion: """
            Steps with their server ids, bundles with their attempts, runs, the reference lists, each session's \
            API and producer, in one transaction, so that a spool switched over resends nothing. Stop the runs on \
            the spool first (a claim in progress is refused); then give every host `database: URL`. The spool is \
            then bound to the database (SPOOL/dopesync.store) and its SQLite file is marked as moved: no command \
            uses it again. Running it twice copies nothing twice. The password comes from \
            DOPESYNC_DATABASE_PASSWORD or the job file's database-password-file. Exit 0; 73 when the file cannot \
            be read or a run holds a claim; 75 when the database cannot be reached; 78 when it refuses the user \
            or password, or the spool is bound to another database.
            """
    )

    @Option(help: "The PostgreSQL database: postgresql://USER@HOST:PORT/DATABASE (no password in it).")
    var to: String

    @OptionGroup var place: SpoolOption

    @Flag(
        help: ArgumentHelp(
            "The spool is bound to another PostgreSQL database, lost for good, and this one replaces it: bind the "
                + "spool to this one (what the lost one recorded is looked up on the server before anything is sent)."))
    var rebind = false

    func run() async throws {
        var typed: [RunSetting: String] = [.database: to]
        typed[.spool] = place.spool
        let settings = try resolveSettings(commandLine: typed, job: place.job, purpose: .spoolOnly)
        guard let database = settings.database else { throw ExitCode(ExitStatus.usage.rawValue) }
        try await MigrateCommand.run(spoolRoot: settings.spool, to: database, rebind: rebind).printAndExit()
    }
}
