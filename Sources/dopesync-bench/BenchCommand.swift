import ArgumentParser
import DopeSync
import NIOCore
import NIOPosix

@main
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dopesync-bench",
        abstract: "Benchmarks for dopesync (run by `make bench`).",
        subcommands: [DevServerLoad.self, MakeBundles.self, RawCapacity.self]
    )

    static func main() async {
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        await main(nil)
    }
}
