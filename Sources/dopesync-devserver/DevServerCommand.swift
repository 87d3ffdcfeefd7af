import ArgumentParser
import DopeSyncDevServer

@main
struct DevServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dopesync-devserver",
        abstract: "The TrueDope API on loopback, for demos, tests and benchmarks."
    )
}
