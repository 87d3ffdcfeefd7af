import ArgumentParser
import DopeSync

struct Inspect: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Validate a bundle without uploading it and show what it holds.",
        discussion: "Exit 0 for a valid bundle, 65 with every reason for an invalid one."
    )

    @Argument(help: "The bundle file (tar or zip, any supported compression).")
    var bundle: String

    @Flag(help: "Print one JSON document instead of text.")
    var json = false

    func run() async throws {
        try finish(InspectCommand.run(bundlePath: bundle, json: json))
    }
}
