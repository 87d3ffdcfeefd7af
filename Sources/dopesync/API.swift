import ArgumentParser
import DopeSync
import Foundation

struct API: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api",
        abstract: "List the APIs the spool's checkpoints were recorded against, or say which API a new URL is.",
        discussion: """
            A step recorded against one API is a fact there alone. A run against a URL new to the store, while \
            the store holds another API's checkpoints, looks each of their steps up on the new API before \
            sending anything; where that API has no lookups it claims nothing (exit 78) until told, here, \
            which API the URL is: --same-as OLD (the same API at a new address: its checkpoints hold) or \
            --another-server (another server: every record is sent to it, once). Without either, lists the \
            APIs with their sessions. The URL is --api's, else the job file's `api:`. Exit 0; 64 for an OLD \
            the store does not know; 78 for a spool bound to another store; 73 or 75 when the store cannot \
            be read or reached.
            """
    )

    @OptionGroup var place: SpoolOption

    @Option(help: "The API's base URL as runs are given it (default: --job's `api:`, $DOPESYNC_API_URL).")
    var api: String?

    @Option(help: "The configured URL is the API that was at this URL, now at a new address.")
    var sameAs: String?

    @Flag(help: "The configured URL is another server, which holds none of the records sent elsewhere.")
    var anotherServer = false

    func validate() throws {
        if sameAs != nil && anotherServer {
            throw ValidationError("--same-as and --another-server are two different answers: give one")
        }
    }

    func run() async throws {
        var typed: [RunSetting: String] = [:]
        typed[.spool] = place.spool
        typed[.database] = place.database
        typed[.api] = api
        let settings = try resolveSettings(commandLine: typed, job: place.job, purpose: .spoolOnly)
        guard !settings.apiURL.isEmpty else {
            // Given, but no http(s) URL (the other commands only show it, so it was left out):
            // this command binds by it, so it names the value and where it came from.
            let given = RunConfiguration.givenText(
                of: .api, commandLine: typed, environment: ProcessInfo.processInfo.environment, jobFile: place.job)
            if let given {
                throw ValidationError(
                    "the API's URL \(MaskedURL.string(given)) (--api, DOPESYNC_API_URL or the job file's api:) is not an http:// or https:// URL"
                )
            }
            throw ValidationError("which API? give --api URL, or --job with `api:` (or DOPESYNC_API_URL)")
        }
        let answer: APICommand.Answer = sameAs.map { .sameAs($0) } ?? (anotherServer ? .anotherServer : .list)
        try await APICommand.run(
            spoolRoot: settings.spool, database: settings.database, apiURL: settings.apiURL, answer: answer
        ).printAndExit()
    }
}
