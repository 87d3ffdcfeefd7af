import ArgumentParser
import DopeSync

@main
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dopesync-bench",
        abstract: "Benchmarks for dopesync (run by `make bench`).",
        subcommands: [DevServerLoad.self, MakeBundles.self, RawCapacity.self]
    )

    /// On the executor `dopesync run` uses, so the raw client is measured as the worker is.
    static func main() async {
        UploadExecutor.install()
        await main(nil)
    }
}
