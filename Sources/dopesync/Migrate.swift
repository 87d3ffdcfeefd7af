import ArgumentParser
import DopeSync

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy the spool's SQLite checkpoints into the PostgreSQL database several hosts will share.",
        discussion: """
            Steps with their server ids, bundles with their attempts, runs and the reference lists, in one \
            transaction, so that a spool switched over resends nothing. Stop the runs on the spool first (a \
            claim in progress is refused); then give every host `database: URL`. The file is left as it was, \
            and running it twice copies nothing twice. The password comes from DOPESYNC_DATABASE_PASSWORD or \
            the job file's database-password-file. Exit 0; 73 when the file cannot be read or a run holds a \
            claim; 75 when the database cannot be reached; 78 when it refuses the user or password.
            """
    )

    @Option(help: "The PostgreSQL database: postgresql://USER@HOST:PORT/DATABASE (no password in it).")
    var to: String

    @OptionGroup var place: SpoolOption

    func run() async throws {
        var typed: [RunSetting: String] = [.database: to]
        typed[.spool] = place.spool
        let settings = try resolveSettings(commandLine: typed, job: place.job, purpose: .spoolOnly)
        guard let database = settings.database else { throw ExitCode(ExitStatus.usage.rawValue) }
        try finish(await MigrateCommand.run(spoolRoot: settings.spool, to: database))
    }
}
