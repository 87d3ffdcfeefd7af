import ArgumentParser

/// `inspect`'s bundle, `--json` and `--spool`: the whole of `dopesync-bundle inspect`, and
/// `dopesync inspect` but for its `--database`.
package struct InspectOptions: ParsableArguments {
    /// `inspect`'s abstract and discussion, the same in both executables.
    package static let configuration = CommandConfiguration(
        abstract: "Validate a bundle without uploading it and show what it holds.",
        discussion: """
            Exit 0 for a valid bundle, 65 with every reason for an invalid one. When the spool's checkpoint \
            database knows the session, the steps already uploaded are listed with their server ids, and the ids \
            its records still to upload name that the server's reference lists (as the last run kept them) do not hold.
            """
    )

    @Argument(help: "The bundle file (tar or zip, any supported compression).")
    package var bundle: String

    @Flag(help: "Print one JSON document instead of text.")
    package var json = false

    @Option(
        help: "The spool whose checkpoint database (SPOOL/dopesync.sqlite) is read for progress and reference lists.")
    package var spool = "./spool"

    package init() {}

    /// The spool's checkpoint database (read only if it exists).
    package var databasePath: String { Spool(root: spool).databasePath }
}
