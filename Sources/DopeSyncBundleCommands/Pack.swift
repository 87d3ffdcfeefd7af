import ArgumentParser

/// `pack`, the same subcommand in `dopesync` and `dopesync-bundle`.
package struct Pack: AsyncParsableCommand {
    package static let configuration = CommandConfiguration(
        abstract: "Build a valid bundle (with manifest) from a session JSON file and its images.",
        discussion: "Validates first (exit 65 with every reason); writes atomically."
    )

    @Argument(help: "The session document (session.json, as docs/bundle-format.md describes it).")
    var sessionFile: String

    @Option(help: "The folder holding the images the session names (default: images/ beside the session file).")
    var images: String?

    @Option(help: "Write the bundle to this file.")
    var output: String?

    @Option(help: "Drop the bundle into this spool's incoming/ folder.")
    var spool: String?

    package init() {}

    package func validate() throws {
        guard (output == nil) != (spool == nil) else {
            throw ValidationError("Give exactly one of --output FILE or --spool DIR.")
        }
    }

    package func run() async throws {
        let destination: BundlePacker.Destination = output.map { .file($0) } ?? .spool(root: spool!)
        try PackCommand.run(sessionFile: sessionFile, imagesDirectory: images, destination: destination).printAndExit()
    }
}
