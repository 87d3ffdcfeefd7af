import ArgumentParser
import DopeSync
import Foundation

struct Check: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check the settings a run would use: the configuration, the API and the token, the spool.",
        discussion: """
            Reads the job file, the environment and these options as `run` does, reads the token, asks the API \
            GET /api/health and, with the token, GET /api/sessions?clientId= with a fresh UUID (nothing is \
            created), and looks at the spool: it exists, its folders are writable, the checkpoint database \
            belongs to this user, the free space. With a PostgreSQL database: it is reachable, takes the user \
            and password, has a schema this dopesync can use (read, never migrated), is the spool's store, and \
            no SQLite checkpoints are left unmigrated. With metrics-file: its folder is writable. One line per \
            check. Exit 0 when all hold; else the code a run would end with: 78 configuration, a URL that is \
            not the API or a database that refuses the password, 77 token refused, 76 TLS certificate not \
            trusted, 75 API or database unreachable, 73 spool, database or metrics folder.
            """
    )

    @OptionGroup var place: SpoolOption

    @OptionGroup var connection: APIOptions

    func run() async throws {
        let typed: [(RunSetting, String?)] = [(.spool, place.spool), (.database, place.database)] + connection.typed
        var settings: RunConfiguration
        do throws(ConfigurationError) {
            settings = try RunConfiguration.resolve(
                commandLine: typed.reduce(into: [:]) { options, pair in
                    if let value = pair.1 { options[pair.0] = value }
                },
                environment: ProcessInfo.processInfo.environment, jobFile: place.job, purpose: .run)
            try await settings.runTokenCommand()
        } catch {
            print("FAIL configuration: \(error)")
            throw ExitCode(error.exitStatus.rawValue)
        }
        for warning in settings.warnings { print("warn \(warning)") }
        let network = APIClient.Network(caFile: settings.caFile, proxy: settings.proxy.proxy)
        try await CheckCommand.run(settings: settings, network: network).printAndExit()
    }
}
