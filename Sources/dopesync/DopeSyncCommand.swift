import ArgumentParser
import DopeSync

@main
struct DopeSyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dopesync",
        abstract: "Upload offline range-session bundles from a spool to the TrueDope API.",
        version: DopeSync.version
    )
}
