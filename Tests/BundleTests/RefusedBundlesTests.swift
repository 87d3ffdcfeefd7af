import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// One bad bundle per rule of docs/bundle-format.md (its rules and "Limits"), each refused
/// with a reason that names the culprit.
@Suite struct RefusedBundlesTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var code: BundleError.Code
        /// Text the culprit must contain (an entry path or a field path).
        var culprit: String
        var limits: BundleLimits = .default
        var make: @Sendable (_ directory: URL) async throws -> URL

        var testDescription: String { name }
    }

    /// A valid layout in `directory/s`, changed by `edit`, archived by `producer`.
    static func bundle(
        _ producer: ArchiveProducer = .gnuTarGzip,
        seed: UInt64 = 5,
        edit: @escaping @Sendable (inout SampleSession, URL) throws -> Void = { _, _ in }
    ) -> @Sendable (URL) async throws -> URL {
        { directory in
            var sample = SampleSession(seed: seed)
            let source = directory.appendingPathComponent("s")
            try sample.writeLayout(to: source)
            try edit(&sample, source)
            try source.appendingPathComponent("session.json").write(sample.sessionBytes)
            let output = directory.appendingPathComponent("bundle")
            try await producer.archive(source, to: output)
            return output
        }
    }

    /// The sample's valid session and an image, plus `extra` entries, in a hostile tar.gz or zip.
    static func hostile(_ extra: [HostileEntry], container: String = "tar") -> @Sendable (URL) async throws -> URL {
        { directory in
            var shape = SampleSession.Shape()
            shape.groups = 0
            let sample = SampleSession(seed: 3, shape: shape)
            let output = directory.appendingPathComponent("hostile")
            try await HostileArchive.write(
                [.file("session.json", sample.sessionBytes)] + extra, to: output, container: container)
            return output
        }
    }

    /// bsdtar writing a format docs/bundle-format.md refuses, from a valid layout.
    static func bsdtarFormat(_ format: String) -> @Sendable (URL) async throws -> URL {
        { directory in
            let source = directory.appendingPathComponent("s")
            try SampleSession(seed: 4).writeLayout(to: source)
            let output = directory.appendingPathComponent("bundle")
            try await runProcess(
                "bsdtar", ["--format", format, "-cf", output.path, "session.json", "images"], in: source)
            return output
        }
    }

    static func limits(_ change: (inout BundleLimits) -> Void) -> BundleLimits {
        var limits = BundleLimits()
        change(&limits)
        return limits
    }

    static let cases: [Case] = [
        // Not an archive libarchive can read, truncated, damaged.
        Case(name: "plain text", code: .notAnArchive, culprit: "bundle") { directory in
            let file = directory.appendingPathComponent("bundle")
            try file.write(Array("this is not an archive\n".utf8))
            return file
        },
        Case(name: "empty file", code: .notAnArchive, culprit: "bundle") { directory in
            let file = directory.appendingPathComponent("bundle")
            try file.write([])
            return file
        },
        Case(name: "truncated tar.gz", code: .truncated, culprit: "bundle") { directory in
            let whole = try await bundle(seed: 6)(directory)
            let bytes = try Data(contentsOf: whole)
            try whole.write(bytes.prefix(bytes.count / 2))
            return whole
        },
        Case(name: "damaged gzip stream", code: .damaged, culprit: "bundle") { directory in
            let whole = try await bundle(seed: 6)(directory)
            var bytes = [UInt8](try Data(contentsOf: whole))
            for index in stride(from: 200, to: min(bytes.count - 8, 1200), by: 7) { bytes[index] ^= 0x5A }
            try whole.write(bytes)
            return whole
        },
        Case(name: "gzip of a bare session.json (raw data)", code: .notAnArchive, culprit: "session.json.gz") {
            directory in
            let file = directory.appendingPathComponent("session.json")
            try file.write(SampleSession(seed: 1).sessionBytes)
            try await runProcess("gzip", ["-k", file.path])
            return directory.appendingPathComponent("session.json.gz")
        },
        Case(
            name: "mtree (reads files from the local disk)", code: .notAnArchive, culprit: "bundle",
            make: bsdtarFormat("mtree")),
        Case(name: "cpio", code: .notAnArchive, culprit: "bundle", make: bsdtarFormat("cpio")),
        Case(name: "ISO 9660", code: .notAnArchive, culprit: "bundle", make: bsdtarFormat("iso9660")),
        Case(name: "7-Zip", code: .notAnArchive, culprit: "bundle", make: bsdtarFormat("7zip")),
        Case(name: "ar", code: .notAnArchive, culprit: "bundle", make: bsdtarFormat("ar")),
        Case(name: "shar", code: .notAnArchive, culprit: "bundle", make: bsdtarFormat("shar")),
        Case(name: "warc", code: .notAnArchive, culprit: "bundle", make: bsdtarFormat("warc")),

        // Entries that are not plain files and folders.
        Case(
            name: "symbolic link (tar)", code: .linkEntry, culprit: "images/link.jpg",
            make: hostile([.entry("images/link.jpg", .symlink, linkTarget: "/etc/passwd")])),
        Case(
            name: "symbolic link (zip)", code: .linkEntry, culprit: "images/link.jpg",
            make: hostile([.entry("images/link.jpg", .symlink, linkTarget: "/etc/passwd")], container: "zip")),
        Case(
            name: "hard link", code: .linkEntry, culprit: "images/copy.jpg",
            make: hostile([.entry("images/copy.jpg", .hardlink, linkTarget: "session.json")])),
        Case(
            name: "character device", code: .specialEntry, culprit: "dev/null",
            make: hostile([.entry("dev/null", .characterDevice)])),
        Case(
            name: "block device", code: .specialEntry, culprit: "dev/sda",
            make: hostile([.entry("dev/sda", .blockDevice)])),
        Case(name: "FIFO", code: .specialEntry, culprit: "pipe", make: hostile([.entry("pipe", .fifo)])),
        Case(
            name: "absolute path", code: .absolutePath, culprit: "/tmp/evil", make: hostile([.file("/tmp/evil", [1])])),
        Case(
            name: "a .. component", code: .parentTraversal, culprit: "images/../../evil",
            make: hostile([.file("images/../../evil", [1])])),
        Case(
            name: "the same path twice", code: .duplicatePath, culprit: "session.json",
            make: hostile([.file("./session.json", [1])])),

        // Limits.
        Case(
            name: "more entries than the limit", code: .tooManyEntries, culprit: "",
            limits: limits { $0.maxEntries = 5 },
            make: hostile((1...10).map { .file("extra/\($0).txt", [1]) })
        ),
        Case(
            name: "more bytes than the limit", code: .tooManyBytes, culprit: "images/",
            limits: limits { $0.maxTotalBytes = 10_000 }, make: bundle()
        ),
        Case(
            name: "a compression ratio past the limit", code: .compressionRatio, culprit: "zeros",
            limits: limits { $0.ratioCheckAfterBytes = 64 * 1024 },
            make: hostile([.file("zeros", [UInt8](repeating: 0, count: 4 << 20))])
        ),
        Case(
            name: "session.json over its limit", code: .sessionTooLarge, culprit: "session.json",
            limits: limits { $0.maxSessionBytes = 100 }, make: bundle()
        ),

        // session.json missing or invalid.
        Case(name: "no session.json", code: .missingSession, culprit: "session.json") { directory in
            let output = directory.appendingPathComponent("bundle")
            try await HostileArchive.write(
                [.file("other.json", SampleSession(seed: 1).sessionBytes), .file("images/a.jpg", [0xFF, 0xD8, 0xFF])],
                to: output)
            return output
        },
        Case(name: "two top-level folders", code: .missingSession, culprit: "session.json") { directory in
            let output = directory.appendingPathComponent("bundle")
            try await HostileArchive.write(
                [.file("a/session.json", SampleSession(seed: 1).sessionBytes), .file("b/x", [1])], to: output)
            return output
        },
        Case(name: "malformed JSON", code: .invalidSession, culprit: "session.json") { directory in
            let output = directory.appendingPathComponent("malformed")
            try await HostileArchive.write([.file("session.json", Array("{\"id\": ".utf8))], to: output)
            return output
        },
        Case(
            name: "a missing required field", code: .invalidSession, culprit: "rifleSetupId",
            make: bundle { sample, _ in
                sample.json["rifleSetupId"] = nil
            }),
        Case(
            name: "a value out of range", code: .invalidSession, culprit: "groupEntries[1].measurement.bulletDiameter",
            make: bundle { sample, _ in
                var groups = sample.json["groupEntries"] as! [[String: any Sendable]]
                var measurement = groups[1]["measurement"] as! [String: any Sendable]
                measurement["bulletDiameter"] = -1
                groups[1]["measurement"] = measurement
                sample.json["groupEntries"] = groups
            }),
        Case(
            name: "a duplicate id", code: .invalidSession, culprit: "dopeEntries[1].id",
            make: bundle { sample, _ in
                var dope = sample.json["dopeEntries"] as! [[String: any Sendable]]
                dope[1]["id"] = dope[0]["id"]
                sample.json["dopeEntries"] = dope
            }),
        Case(
            name: "a date without a time zone", code: .invalidSession, culprit: "sessionDate",
            make: bundle { sample, _ in
                sample.json["sessionDate"] = "2026-05-04T09:30:00"
            }),

        // Images and manifest.
        Case(
            name: "a missing image", code: .missingImage, culprit: "groupEntries[0].imageFileNames",
            make: bundle { _, source in
                try FileManager.default.removeItem(at: source.appendingPathComponent("images/group1-1.jpg"))
            }),
        Case(
            name: "an image that is not JPEG/PNG/HEIC/WebP", code: .unsupportedImageType,
            culprit: "images/group1-1.jpg",
            make: bundle { _, source in
                try source.appendingPathComponent("images/group1-1.jpg").write(Array("GIF89a not allowed".utf8))
            }),
        Case(
            name: "a manifest SHA-256 mismatch", code: .manifestMismatch, culprit: "images/group2-4.heic",
            make: manifestBundle { source in
                var bytes = [UInt8](try Data(contentsOf: source.appendingPathComponent("images/group2-4.heic")))
                bytes[bytes.count - 1] ^= 0xFF  // same size, other content
                try source.appendingPathComponent("images/group2-4.heic").write(bytes)
            }),
        Case(
            name: "a manifest size mismatch", code: .manifestMismatch, culprit: "session.json",
            make: manifestBundle { source in
                try source.appendingPathComponent("session.json").write(
                    SampleSession(seed: 5).sessionBytes + Array("  ".utf8))
            }),
        Case(
            name: "a manifest listing a missing file", code: .manifestMismatch, culprit: "images/group1-1.jpg",
            make: manifestBundle { source in
                try FileManager.default.removeItem(at: source.appendingPathComponent("images/group1-1.jpg"))
                // Keep the records valid: the group no longer names the image.
                var sample = SampleSession(seed: 5)
                var groups = sample.json["groupEntries"] as! [[String: any Sendable]]
                groups[0]["imageFileNames"] = [String]()
                sample.json["groupEntries"] = groups
                try source.appendingPathComponent("session.json").write(sample.sessionBytes)
            }),
        Case(
            name: "a manifest of another version", code: .manifestVersion, culprit: "manifest.json",
            make: manifestBundle { source in
                try source.appendingPathComponent("manifest.json").write(
                    Array(#"{"format": "truedope-session-bundle", "version": 2, "files": {}}"#.utf8))
            }),
    ]

    /// A valid bundle with a manifest, whose folder `edit` then changes behind the manifest's back.
    static func manifestBundle(_ edit: @escaping @Sendable (URL) throws -> Void) -> @Sendable (URL) async throws -> URL
    {
        { directory in
            let source = directory.appendingPathComponent("s")
            try SampleSession(seed: 5).writeLayout(to: source, manifest: true)
            try edit(source)
            let output = directory.appendingPathComponent("bundle")
            try await ArchiveProducer.gnuTarGzip.archive(source, to: output)
            return output
        }
    }

    @Test("each rule refuses its bundle, naming the culprit", arguments: cases)
    func eachRuleRefusesItsBundle(_ testCase: Case) async throws {
        try await withTemporaryDirectory { directory in
            let archive = try await testCase.make(directory)
            let error = try #require(throws: BundleValidationError.self) {
                try BundleInspector(limits: testCase.limits).inspect(path: archive.path)
            }
            let match = error.errors.first { $0.code == testCase.code }
            #expect(match != nil, "expected \(testCase.code), got: \(error)")
            if let match {
                let named =
                    testCase.culprit.isEmpty || match.culprit.contains(testCase.culprit)
                    || match.message.contains(testCase.culprit)
                #expect(named, "the reason should name \(testCase.culprit): \(match)")
                #expect(!match.message.isEmpty)
            }
        }
    }

    @Test("every reason of a bundle is reported, not just the first")
    func everyReasonIsReported() async throws {
        try await withTemporaryDirectory { directory in
            var sample = SampleSession(seed: 11)
            sample.json["humidity"] = 120
            sample.json["createdAt"] = "yesterday"
            // (Images are resolved only once session.json is valid, so none is reported missing here.)
            let output = directory.appendingPathComponent("bundle")
            try await HostileArchive.write(
                [
                    .file("session.json", sample.sessionBytes),
                    .entry("images/x.jpg", .symlink, linkTarget: "/etc/shadow"), .file("../up", [0]),
                ],
                to: output
            )
            let error = try #require(throws: BundleValidationError.self) {
                try BundleInspector().inspect(path: output.path)
            }
            let codes = error.errors.map(\.code.description)
            #expect(codes.contains("link_entry"))
            #expect(codes.contains("path_traversal"))
            #expect(error.errors.contains { $0.culprit.contains("humidity") })
            #expect(error.errors.contains { $0.culprit.contains("createdAt") })
        }
    }

    @Test("a 1 GiB decompression bomb is refused while it is read, not after")
    func decompressionBombIsStoppedEarly() async throws {
        try await withTemporaryDirectory { directory in
            let bomb = directory.appendingPathComponent("bomb.tar.gz")
            try await HostileArchive.writeBomb(
                to: bomb, unpackedBytes: 1 << 30, session: SampleSession(seed: 2).sessionBytes)
            let compressedSize = try FileManager.default.attributesOfItem(atPath: bomb.path)[.size] as! Int
            #expect(compressedSize < 2 << 20)

            let error = try #require(throws: BundleValidationError.self) {
                try BundleInspector().inspect(path: bomb.path)
            }
            #expect(error.code == .compressionRatio)
            // Stopped just past the 16 MiB threshold, not at the gigabyte.
            #expect(error.errors[0].message.contains("(16"), "\(error)")
        }
    }
}
