import DopeSync
import DopeSyncTestSupport
import Foundation
import Testing

/// `dopesync-bundle`, the bundle half of dopesync for producers' machines, links no PostgreSQL, TLS
/// or HTTP client (the layers `Package.swift` enforces), and its `inspect` and `pack` are
/// `dopesync`'s: the same output and exit statuses for the same bundle.
@Suite struct BundleToolLinkageTests {
    /// Swift modules `dopesync-bundle` must not link, as a mangled symbol names them (the name with
    /// its length before it).
    static let serverModules = ["11PostgresNIO", "6NIOSSL", "15AsyncHTTPClient"]

    /// Every symbol `nm` lists of a built product, defined or wanted, one a line.
    static func symbols(of product: String) async throws -> [Substring] {
        let listed = try await runProcess("nm", ["--format=just-symbols", builtProduct(product).path])
        return listed.stdout.split(separator: "\n")
    }

    @Test("dopesync-bundle has no symbol of PostgresNIO, NIOSSL or AsyncHTTPClient; dopesync has each one's")
    func noServerModules() async throws {
        let bundleTool = try await Self.symbols(of: "dopesync-bundle")
        #expect(bundleTool.count > 1000, "nm listed the symbols of a Swift program")
        for module in Self.serverModules {
            let found = bundleTool.filter { $0.contains(module) }
            #expect(found.isEmpty, "dopesync-bundle links \(module): \(found.prefix(3))")
        }
        // The same search finds each where it is: the worker's binary.
        let worker = try await Self.symbols(of: "dopesync")
        for module in Self.serverModules {
            #expect(worker.contains { $0.contains(module) }, "dopesync links \(module)")
        }
    }

    @Test("pack into a spool, inspect, run, inspect: dopesync-bundle says what dopesync says, progress included")
    func packThenInspectAsDopesync() async throws {
        try await withTemporarySpool { spool, directory in
            let sample = SampleSession(seed: 26)
            let source = directory.appendingPathComponent("s")
            try sample.writeLayout(to: source)
            let pack = try await runBuilt(
                "dopesync-bundle", ["pack", source.appendingPathComponent("session.json").path, "--spool", spool.root])
            #expect(pack.status == 0, "\(pack.stderr)")
            let name = "\(sample.sessionID).tar.gz"
            #expect(pack.stdout == "packed \(spool.path(.incoming, name))\n")

            // `inspect` of the bundle in `folder`, text and JSON, by both programs: the same.
            func inspectAsDopesync(in folder: Spool.Folder) async throws -> String {
                var text = ""
                for json in [false, true] {
                    let arguments =
                        ["inspect", spool.path(folder, name), "--spool", spool.root] + (json ? ["--json"] : [])
                    let bundleTool = try await runBuilt("dopesync-bundle", arguments)
                    let worker = try await runBuilt("dopesync", arguments)
                    #expect(bundleTool.status == 0, "\(bundleTool.stderr)")
                    #expect(bundleTool.stdout == worker.stdout, "inspect\(json ? " --json" : "")")
                    #expect(bundleTool.stderr == worker.stderr)
                    if !json { text = bundleTool.stdout }
                }
                return text
            }
            let packed = try await inspectAsDopesync(in: .incoming)
            #expect(packed.contains(sample.sessionID) && packed.contains("with manifest"), "\(packed)")
            #expect(!packed.contains("checkpoints"))

            try await withDevServer { server in
                let (summary, _) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(summary.done == 1)
            }
            // The spool's SQLite file, read by both: every step done, with its server id.
            let done = try await inspectAsDopesync(in: .done)
            let steps = sample.expectedRequestCount
            #expect(done.contains("checkpoints  \(steps) of \(steps) steps done"), "\(done)")
        }
    }

    @Test("an invalid bundle: exit 65 naming the problem, as dopesync says it; no --database")
    func invalidBundle() async throws {
        try await withTemporaryDirectory { directory in
            // A bundle made as a producer's `tar` would, short of an image its session names.
            let sample = SampleSession(seed: 27)
            let source = directory.appendingPathComponent("s")
            try sample.writeLayout(to: source)
            let missing = try #require(sample.images.keys.sorted().first)
            try FileManager.default.removeItem(at: source.appendingPathComponent("images/\(missing)"))
            let bundle = directory.appendingPathComponent("bad.tgz")
            try await ArchiveProducer.gnuTarGzip.archive(source, to: bundle)

            let bundleTool = try await runBuilt("dopesync-bundle", ["inspect", bundle.path])
            #expect(bundleTool.status == 65)
            #expect(
                bundleTool.stdout.contains("[missing_image]") && bundleTool.stdout.contains(missing),
                "\(bundleTool.stdout)")
            let worker = try await runBuilt("dopesync", ["inspect", bundle.path])
            #expect(bundleTool.stdout == worker.stdout)

            // The shared database is the worker's: the producers' tool does not know the option.
            let database = try await runBuilt(
                "dopesync-bundle", ["inspect", bundle.path, "--database", "postgresql://nobody@127.0.0.1:1/none"])
            #expect(database.status == 64)
        }
    }

    @Test("dopesync-bundle --version is dopesync's")
    func version() async throws {
        let bundleTool = try await runBuilt("dopesync-bundle", ["--version"])
        #expect(bundleTool.status == 0)
        #expect(bundleTool.stdout == DopeSyncInfo.version + "\n")
    }
}
