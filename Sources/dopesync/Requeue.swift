import ArgumentParser
import DopeSync

struct Requeue: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Move failed bundles back to incoming/ with a fresh attempt count; they resume from their checkpoints.",
        discussion: """
            NAME is a file in failed/ (with or without the failed/ prefix, or as its path, or its .error \
            sidecar's path), or a bundle waiting for retry in \
            incoming/, which is made due now (its attempts kept). A failed bundle is due at once; a name \
            taken in incoming/ gets a suffix. Its failed/NAME.error sidecar is removed: the last error stays in \
            the checkpoint database (the bundle's row in SPOOL/dopesync.sqlite, last_error_*). Exit 0; 1 when a NAME is neither in failed/ nor waiting for retry (the \
            others are still requeued); 73 when the spool cannot be read or written; 75 when the shared database (database:) cannot be reached; 78 when it refuses the credentials.
            """
    )

    @Argument(help: "Bundles in failed/ to requeue, or waiting for retry in incoming/ to make due now.")
    var names: [String] = []

    @Flag(help: "Requeue every bundle in failed/.")
    var all = false

    @OptionGroup var spool: SpoolOption

    func validate() throws {
        guard all != !names.isEmpty else { throw ValidationError("Give bundle names or --all (not both).") }
    }

    func run() async throws {
        let settings = try spool.settings()
        try await RequeueCommand.run(
            spoolRoot: settings.spool, selection: all ? .all : .names(names), database: settings.database
        ).printAndExit()
    }
}
