import DopeSyncTestSupport
import Foundation
import Testing

/// `dopesync inspect` and `dopesync pack` as a person runs them: the built binary, its output and
/// its exit code.
@Suite struct InspectAndPackCommandTests {
    @Test("inspect a valid bundle: exit 0 and a summary of what it holds")
    func inspectValidBundle() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 21)
            let source = directory.appendingPathComponent("s")
            try sample.writeLayout(to: source)
            let bundle = directory.appendingPathComponent("b.tgz")
            try await ArchiveProducer.gnuTarGzip.archive(source, to: bundle)

            let result = try await runBuilt("dopesync", ["inspect", bundle.path])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stdout.contains(sample.sessionID))
            #expect(result.stdout.contains("3 DOPE entries"))
            #expect(result.stdout.contains("group1-1.jpg  jpeg"))
            #expect(result.stdout.contains("10000 entries"))  // the limits in force

            let json = try await runBuilt("dopesync", ["inspect", "--json", bundle.path])
            #expect(json.status == 0)
            let document = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as! [String: Any]
            #expect(document["valid"] as? Bool == true)
            #expect(document["sessionID"] as? String == sample.sessionID)
            let counts = document["counts"] as! [String: Any]
            #expect(counts["requests"] as? Int == sample.expectedRequestCount)
            #expect((document["images"] as! [Any]).count == sample.images.count)
        }
    }

    @Test("inspect an invalid bundle: exit 65 and every reason, in text and JSON")
    func inspectInvalidBundle() async throws {
        try await withTemporaryDirectory { directory in
            var sample = SampleSession(seed: 22)
            sample.json["humidity"] = 140
            let bundle = directory.appendingPathComponent("bad.tgz")
            try await HostileArchive.write(
                [.file("session.json", sample.sessionBytes), .entry("evil", .symlink, linkTarget: "/")], to: bundle)

            let result = try await runBuilt("dopesync", ["inspect", bundle.path])
            #expect(result.status == 65)
            #expect(result.stdout.contains("humidity: must be between 0 and 100 (was 140)"), "\(result.stdout)")
            #expect(result.stdout.contains("[link_entry] evil"))

            let json = try await runBuilt("dopesync", ["inspect", "--json", bundle.path])
            #expect(json.status == 65)
            let document = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as! [String: Any]
            #expect(document["valid"] as? Bool == false)
            let codes = (document["problems"] as! [[String: Any]]).compactMap { $0["code"] as? String }
            #expect(codes.contains("link_entry") && codes.contains("invalid_session"))
        }
    }

    @Test("inspect of a file that does not exist: exit 65 naming it")
    func inspectMissingFile() async throws {
        let result = try await runBuilt("dopesync", ["inspect", "/nonexistent/bundle.tgz"])
        #expect(result.status == 65)
        #expect(result.stdout.contains("/nonexistent/bundle.tgz"))
    }

    @Test("pack validates first: an invalid session gives exit 65 and writes nothing")
    func packRefusesInvalidSession() async throws {
        try await withTemporaryDirectory { directory in
            var sample = SampleSession(seed: 23)
            sample.json["rifleSetupId"] = 0
            let source = directory.appendingPathComponent("s")
            try sample.writeLayout(to: source)
            let output = directory.appendingPathComponent("out.tgz")
            let result = try await runBuilt(
                "dopesync", ["pack", source.appendingPathComponent("session.json").path, "--output", output.path])
            #expect(result.status == 65)
            #expect(result.stderr.contains("rifleSetupId: must be > 0 (was 0)"), "\(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: output.path))
        }
    }

    @Test("pack --output gives the file the mode the umask asks for: 0600 under umask 077, 0644 under 022")
    func packRespectsTheUmask() async throws {
        try await withTemporaryDirectory { directory in
            let source = directory.appendingPathComponent("s")
            try SampleSession(seed: 25).writeLayout(to: source)
            for (mask, mode) in [("077", 0o600), ("022", 0o644)] {
                let output = directory.appendingPathComponent("out-\(mask).tgz").path
                _ = try await runProcess(
                    "/bin/sh",
                    [
                        "-c", "umask \(mask); exec \"$0\" \"$@\"", builtProduct("dopesync").path, "pack",
                        source.appendingPathComponent("session.json").path, "--output", output,
                    ])
                let attributes = try FileManager.default.attributesOfItem(atPath: output)
                #expect((attributes[.posixPermissions] as? Int) == mode, "umask \(mask)")
            }
        }
    }

    @Test("pack then inspect: the packed bundle is valid")
    func packThenInspect() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 24)
            let source = directory.appendingPathComponent("s")
            try sample.writeLayout(to: source)
            let output = directory.appendingPathComponent("out.tgz")
            let pack = try await runBuilt(
                "dopesync",
                [
                    "pack", source.appendingPathComponent("session.json").path, "--images",
                    source.appendingPathComponent("images").path, "--output", output.path,
                ])
            #expect(pack.status == 0, "\(pack.stderr)")
            let inspect = try await runBuilt("dopesync", ["inspect", output.path])
            #expect(inspect.status == 0, "\(inspect.stdout)")
            #expect(inspect.stdout.contains("with manifest"))
        }
    }

    @Test("pack needs exactly one destination: exit 64")
    func packNeedsOneDestination() async throws {
        let result = try await runBuilt("dopesync", ["pack", "session.json"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("--output") && result.stderr.contains("--spool"))
    }

    @Test("a 1 GiB bomb is refused by the binary with bounded memory")
    func bombWithBoundedMemory() async throws {
        try await withTemporaryDirectory { directory in
            let bomb = directory.appendingPathComponent("bomb.tgz")
            try await HostileArchive.writeBomb(
                to: bomb, unpackedBytes: 1 << 30, session: SampleSession(seed: 2).sessionBytes)
            // GNU time reports the child's peak resident set in KiB.
            let result = try await runProcess(
                "/usr/bin/time", ["-f", "maxrss_kib=%M", builtProduct("dopesync").path, "inspect", bomb.path],
                allowFailure: true)
            #expect(result.status == 65)
            #expect(result.stdout.contains("decompression_bomb"))
            let line = try #require(result.stderr.split(separator: "\n").last { $0.hasPrefix("maxrss_kib=") })
            let kib = try #require(Int(line.dropFirst("maxrss_kib=".count)))
            // Under AddressSanitizer (`make sanitize`) the shadow memory and the quarantine of freed
            // blocks come on top: the bound doubles there, and still catches memory growing with the bomb.
            let bound = ProcessInfo.processInfo.environment["DOPESYNC_SANITIZER"] == "address" ? 128 * 1024 : 64 * 1024
            #expect(kib < bound, "peak RSS \(kib) KiB")
        }
    }
}
