import ArgumentParser
import DopeSync
import Foundation
import NIOCore
import NIOPosix

@main
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dopesync-bench",
        abstract: "Benchmarks for dopesync (run by `make bench`).",
        subcommands: [DevServerLoad.self, MakeBundles.self, RawCapacity.self]
    )

    /// On the executor `dopesync run` uses (`DOPESYNC_EXECUTOR=cooperative` as it does), so the raw
    /// client is measured as the worker is.
    static func main() async {
        if ProcessInfo.processInfo.environment["DOPESYNC_EXECUTOR"] != "cooperative" {
            NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        }
        await main(nil)
    }
}
