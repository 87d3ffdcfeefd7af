import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

/// Entry names in any script are read exactly, whatever locale the process was given: cron and
/// systemd give `C` or nothing, and libarchive decodes zip and pax names into the locale's
/// character set. The built `dopesync` runs as a child process under each environment.
@Suite struct EntryNamesTests {
    /// Image names as German, Chinese, Arabic and emoji-loving phone apps write them.
    static let names = ["Scheibe-1-ü", "靶紙-2", "هدف-ضبط", "🎯-grüppe", "Ñandú-ça"]

    static let producers: [ArchiveProducer] = [
        .pythonZip, .bsdtarZip, .zipDeflate, .gnuTarGzip, .bsdtarPaxZstd, .pythonTarXz,
    ]

    /// The environments a scheduler gives: cron's `C`, nothing at all, and `env -i`.
    static let environments: [(label: String, env: [String])] = [
        ("LC_ALL=C", ["LC_ALL=C"]),
        ("LANG unset", ["-u", "LANG", "-u", "LC_ALL", "-u", "LC_CTYPE", "-u", "LANGUAGE"]),
        ("env -i", ["-i"] + sanitizerVariables),
    ]

    /// Under `make sanitize`, where LeakSanitizer finds its symbolizer: without it (no PATH) the
    /// suppressions built into the binary cannot match their function names. Nothing otherwise.
    static var sanitizerVariables: [String] {
        let environment = ProcessInfo.processInfo.environment
        guard environment["DOPESYNC_SANITIZER"] != nil, let symbolizer = environment["ASAN_SYMBOLIZER_PATH"] else {
            return []
        }
        return ["ASAN_SYMBOLIZER_PATH=\(symbolizer)"]
    }

    /// A bundle of `sample` made by `producer`.
    static func bundle(_ sample: SampleSession, by producer: ArchiveProducer, in directory: URL, name: String)
        async throws
        -> URL
    {
        let source = directory.appendingPathComponent("src-\(name)")
        try sample.writeLayout(to: source, manifest: true)
        let archive = directory.appendingPathComponent(name)
        try await producer.archive(source, to: archive)
        return archive
    }

    /// The built `dopesync` with `arguments`, under `env ENV…`.
    static func dopesync(_ arguments: [String], env: [String]) async throws -> ProcessOutput {
        try await runProcess("env", env + [builtProduct("dopesync").path] + arguments, allowFailure: true)
    }

    @Test(
        "inspect reads names in every script exactly, from every producer, under every scheduler's locale",
        arguments: producers)
    func inspectReadsEveryName(producer: ArchiveProducer) async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 77).renamingImages(to: Self.names)
            // zip adds .zip to a bare name
            let archive = try await Self.bundle(sample, by: producer, in: directory, name: "bundle.archive")
            for (label, env) in Self.environments {
                let result = try await Self.dopesync(["inspect", "--json", archive.path], env: env)
                #expect(result.status == 0, "\(producer) under \(label): \(result.stdout)\(result.stderr)")
                let report = try JSONDecoder().decode(Report.self, from: Data(result.stdout.utf8))
                #expect(
                    Set(report.images?.map(\.fileName) ?? []) == Set(sample.images.keys), "\(producer) under \(label)")
                for image in report.images ?? [] {
                    #expect(image.sha256 == sample.images[image.fileName].map(sha256Hex), "\(image.fileName)")
                }
            }
        }
    }

    @Test(
        "run under every scheduler's locale uploads every producer's bundle with the exact names",
        arguments: environments.map(\.label))
    func runUploadsExactNames(environment label: String) async throws {
        let env = Self.environments.first { $0.label == label }!.env
        try await withTemporaryDirectory { directory in
            let spool = Spool(root: directory.appendingPathComponent("spool").path)
            try await spool.create()
            var samples: [SampleSession] = []
            for (index, producer) in Self.producers.enumerated() {
                let sample = SampleSession(seed: 700 + UInt64(index)).renamingImages(to: Self.names)
                samples.append(sample)
                let archive = try await Self.bundle(sample, by: producer, in: directory, name: "b\(index).archive")
                try FileManager.default.moveItem(atPath: archive.path, toPath: spool.path(.incoming, "b\(index)"))
            }
            try await withDevServer { server in
                let arguments = [
                    "run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0", "--progress", "never",
                ]
                let result = try await Self.dopesync(arguments, env: env + ["DOPESYNC_API_TOKEN=\(server.token)"])
                #expect(result.status == 0, "\(label): \(result.stderr)")
                #expect(try await spool.list(.done).count == samples.count)
                #expect(try await spool.list(.failed).isEmpty)
                for sample in samples {
                    let items = try #require(
                        (try await server.getJSON("/api/sessions?clientId=\(sample.sessionID)") as? [String: Any])?[
                            "items"] as? [[String: Any]])
                    let id = try #require(items.first?["id"] as? Int)
                    let tree = try #require(try await server.getJSON("/api/sessions/\(id)") as? [String: Any])
                    let groups = try #require(tree["groups"] as? [[String: Any]])
                    let uploaded = groups.flatMap {
                        ($0["images"] as? [[String: Any]] ?? []).compactMap { $0["fileName"] as? String }
                    }
                    // Byte for byte: String's == would call NFC and NFD names equal.
                    #expect(Set(uploaded.map { Array($0.utf8) }) == Set(sample.images.keys.map { Array($0.utf8) }))
                }
            }
        }
    }

    @Test("a name that is not UTF-8 is refused, naming the entry with its bytes escaped, in tar and zip")
    func namesThatAreNotUTF8AreRefused() async throws {
        try await withTemporaryDirectory { directory in
            // Latin-1 in a GNU tar header, and bytes that are not UTF-8 in a zip entry flagged UTF-8.
            let script = """
                import io, sys, tarfile, zipfile
                tar, zip = sys.argv[1], sys.argv[2]
                data = bytes([0xFF, 0xD8, 0xFF, 0xE0]) + b"jpeg"
                with tarfile.open(tar, "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as t:
                    info = tarfile.TarInfo("images/Scheibe-\\u00fc.jpg"); info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
                with zipfile.ZipFile(zip, "w") as z:
                    z.writestr(zipfile.ZipInfo("images/x\\u00fcy.jpg"), data)
                raw = open(zip, "rb").read().replace("images/x\\u00fcy.jpg".encode(), b"images/x\\xff\\xfey.jpg")
                open(zip, "wb").write(raw)
                """
            let tar = directory.appendingPathComponent("latin1.tar").path
            let zip = directory.appendingPathComponent("flagged.zip").path
            try await runProcess("python3", ["-c", script, tar, zip])

            let tarResult = try await Self.dopesync(["inspect", tar], env: ["-i"])
            #expect(tarResult.status == 65)
            #expect(
                tarResult.stdout.contains(
                    "[invalid_entry_name] images/Scheibe-\\xfc.jpg: this entry's name is not valid UTF-8"),
                "\(tarResult.stdout)")

            let zipResult = try await Self.dopesync(["inspect", "--json", zip], env: ["LC_ALL=C"])
            #expect(zipResult.status == 65)
            let report = try JSONDecoder().decode(Report.self, from: Data(zipResult.stdout.utf8))
            let problem = try #require(report.problems?.first)
            #expect(problem.code == "invalid_entry_name")
            #expect(problem.culprit == "entry 1")
            #expect(problem.message.contains("marked UTF-8 but is not valid UTF-8"))
        }
    }

    /// The parts of `inspect --json` these tests read.
    struct Report: Decodable {
        struct Image: Decodable {
            var fileName: String
            var sha256: String
        }
        struct Problem: Decodable {
            var code: String
            var culprit: String
            var message: String
        }
        var valid: Bool
        var images: [Image]?
        var problems: [Problem]?
    }
}
