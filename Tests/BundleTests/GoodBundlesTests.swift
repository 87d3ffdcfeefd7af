import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// Every real producer's bundle of the same session is accepted and reads the same.
@Suite struct GoodBundlesTests {
    static let producerLayouts: [(ArchiveProducer, ArchiveProducer.Layout)] =
        ArchiveProducer.allCases.map { ($0, .plain) }
        + [
            (.gnuTarGzip, .dotSlash), (.gnuTarGzip, .topFolder), (.bsdtarGzip, .dotSlash), (.zipDeflate, .topFolder),
            (.pythonTarXz, .topFolder), (.gnuTarZstd, .topFolder),
        ]

    @Test("a bundle from every real producer is accepted", arguments: producerLayouts)
    func everyProducerIsAccepted(producer: ArchiveProducer, layout: ArchiveProducer.Layout) async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 42)
            let source = directory.appendingPathComponent("mysession")
            try sample.writeLayout(to: source, manifest: true)
            let archive = directory.appendingPathComponent("bundle.archive")  // the name says nothing
            try await producer.archive(source, to: archive, layout: layout)

            let bundle = try BundleInspector().inspect(path: archive.path)

            #expect(bundle.session.session.id == sample.sessionID)
            #expect(bundle.root == (layout == .topFolder ? "mysession/" : ""))
            #expect(bundle.hasManifest)
            #expect(bundle.ignoredFiles.isEmpty)
            #expect(Set(bundle.images.keys) == Set(sample.images.keys))
            for (name, bytes) in sample.images {
                #expect(bundle.images[name]?.size == Int64(bytes.count))
                #expect(bundle.images[name]?.sha256 == sha256Hex(bytes))
            }
        }
    }

    @Test("files no record uses are reported as ignored, not refused")
    func extraFilesAreIgnored() async throws {
        try await withTemporaryDirectory { directory in
            let source = directory.appendingPathComponent("s")
            try SampleSession(seed: 1).writeLayout(to: source)
            try source.appendingPathComponent("notes.txt").write(Array("hello".utf8))
            try source.appendingPathComponent("images/unused.bin").write([1, 2, 3])
            let archive = directory.appendingPathComponent("b.tgz")
            try await ArchiveProducer.gnuTarGzip.archive(source, to: archive)

            let bundle = try BundleInspector().inspect(path: archive.path)
            #expect(bundle.ignoredFiles.sorted() == ["images/unused.bin", "notes.txt"])
        }
    }

    @Test("pack writes a bundle that inspect accepts, and tar czf and zip of the same content agree")
    func packedAndHandMadeBundlesAgree() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 7)
            let source = directory.appendingPathComponent("session")
            try sample.writeLayout(to: source)
            let packed = directory.appendingPathComponent("packed.tar.gz").path
            let written = try BundlePacker().pack(
                sessionFile: source.appendingPathComponent("session.json").path,
                imagesDirectory: source.appendingPathComponent("images").path,
                destination: .file(packed)
            )
            #expect(written == packed)
            let tarred = directory.appendingPathComponent("tarred.tgz")
            try await ArchiveProducer.gnuTarGzip.archive(source, to: tarred)
            let zipped = directory.appendingPathComponent("zipped.zip")
            try await ArchiveProducer.zipDeflate.archive(source, to: zipped)

            let bundles = try [packed, tarred.path, zipped.path].map { try BundleInspector().inspect(path: $0) }
            #expect(bundles[0].hasManifest)
            for bundle in bundles {
                #expect(bundle.session == bundles[0].session)
                #expect(bundle.images.mapValues(\.sha256) == bundles[0].images.mapValues(\.sha256))
            }
            // No leftover temporary file beside the output.
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter {
                $0.hasPrefix(".")
            }
            #expect(leftovers.isEmpty)
        }
    }

    @Test("pack into a spool lands in incoming/, and a second pack of the same session gets a suffix")
    func packIntoSpoolNeverReplaces() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 8)
            let source = directory.appendingPathComponent("session")
            try sample.writeLayout(to: source)
            let spool = directory.appendingPathComponent("spool")
            for folder in ["tmp", "incoming"] {
                try FileManager.default.createDirectory(
                    at: spool.appendingPathComponent(folder), withIntermediateDirectories: true)
            }
            let session = source.appendingPathComponent("session.json").path
            let images = source.appendingPathComponent("images").path
            let first = try BundlePacker().pack(
                sessionFile: session, imagesDirectory: images, destination: .spool(root: spool.path))
            let second = try BundlePacker().pack(
                sessionFile: session, imagesDirectory: images, destination: .spool(root: spool.path))

            #expect(first == spool.path + "/incoming/\(sample.sessionID).tar.gz")
            #expect(second == spool.path + "/incoming/\(sample.sessionID).1.tar.gz")
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: spool.appendingPathComponent("tmp").path).isEmpty)
        }
    }

    /// Writes `sample`'s folder layout under `directory/name` and packs it as `directory/name.tgz`.
    static func layoutAndPack(_ sample: SampleSession, in directory: URL, name: String) throws -> (
        source: URL, packed: String
    ) {
        let source = directory.appendingPathComponent(name)
        try sample.writeLayout(to: source)
        let packed = try BundlePacker().pack(
            sessionFile: source.appendingPathComponent("session.json").path,
            imagesDirectory: source.appendingPathComponent("images").path,
            destination: .file(directory.appendingPathComponent(name + ".tgz").path)
        )
        return (source, packed)
    }

    @Test("images stream out of the archive with their validated bytes, in one pass when in order")
    func imagesStreamWithoutExtracting() async throws {
        try await withTemporaryDirectory { directory in
            // Several read chunks each.
            let sample = SampleSession(
                seed: 9, shape: SampleSession.Shape().withImages(groups: 3, perGroup: 2, bytes: 600_000))
            let (source, packed) = try Self.layoutAndPack(sample, in: directory, name: "s")
            let zipped = directory.appendingPathComponent("z.zip")
            try await ArchiveProducer.zipStored.archive(source, to: zipped)

            for path in [packed, zipped.path] {
                let bundle = try BundleInspector().inspect(path: path)
                let reader = BundleEntryReader(bundle: bundle)
                for reference in bundle.session.imageReferences {
                    let image = try #require(bundle.images[reference.fileName])
                    #expect(try Self.streamed(image, from: reader) == sample.images[reference.fileName])
                    #expect(image.bytes == nil)  // larger than a chunk: streamed, never held whole
                }
                if path == packed { #expect(reader.openCount == 1) }
            }
        }
    }

    @Test("an entry without a name is passed over alike by validation and when images stream back")
    func anEntryWithoutANameDoesNotShiftTheImages() async throws {
        try await withTemporaryDirectory { directory in
            // Larger than the images kept from validation, so each is found again in the archive.
            let sample = SampleSession(
                seed: 13, shape: SampleSession.Shape().withImages(groups: 2, perGroup: 2, bytes: 300_000))
            let source = directory.appendingPathComponent("s")
            try sample.writeLayout(to: source)
            // Python's zipfile writes a file entry with an empty name first (bsdtar skips it as
            // having "empty or unreadable filename"). Before the fix, such a bundle validated and
            // then failed mid-upload as changed.
            let script = """
                import os, sys, zipfile
                source, out = sys.argv[1], sys.argv[2]
                with zipfile.ZipFile(out, "w") as z:
                    z.writestr(zipfile.ZipInfo(""), b"no name")
                    for folder, _, files in sorted(os.walk(source)):
                        for name in sorted(files):
                            path = os.path.join(folder, name)
                            z.write(path, os.path.relpath(path, source))
                """
            let zip = directory.appendingPathComponent("nameless.zip").path
            try await runProcess("python3", ["-c", script, source.path, zip])

            let bundle = try BundleInspector().inspect(path: zip)
            #expect(Set(bundle.images.keys) == Set(sample.images.keys))
            let reader = BundleEntryReader(bundle: bundle)
            for image in bundle.images.values.sorted(by: { $0.entryPath < $1.entryPath }) {
                #expect(image.bytes == nil)  // streamed from the archive
                #expect(try Self.streamed(image, from: reader) == sample.images[image.fileName], "\(image.entryPath)")
            }
            #expect(reader.openCount == 1)  // in archive order: one pass
        }
    }

    @Test("the fuzzer's zip with a nameless entry is accepted, and every image streams back as validated")
    func theFuzzersNamelessEntryZipStreamsBack() throws {
        let bundle = try BundleInspector().inspect(path: HostileBundles.zipEntryWithoutAName.path)
        #expect(bundle.images.count == 4)
        let reader = BundleEntryReader(bundle: bundle)
        for image in bundle.images.values.sorted(by: { $0.entryPath < $1.entryPath }) {
            // Small: kept from validation too, so the archive's bytes can be compared with them.
            let kept = try #require(image.bytes)
            #expect(try Self.streamed(image, from: reader) == kept, "\(image.entryPath)")
        }
    }

    @Test("the fuzzer's zip whose entries can be read through but not skipped: every image streams back as validated")
    func theFuzzersUnskippableEntryZipStreamsBack() throws {
        let bundle = try BundleInspector().inspect(path: HostileBundles.zipEntryThatCannotBeSkipped.path)
        let reader = BundleEntryReader(bundle: bundle)
        // Out of archive order, as the fuzz target asks (by name): the archive is opened again and
        // the entries before each image are passed over.
        for image in bundle.images.values.sorted(by: { $0.fileName < $1.fileName }) {
            // The last chunk checks the size and SHA-256 validation recorded.
            #expect(try Self.streamed(image, from: reader).count == Int(image.size), "\(image.entryPath)")
        }
    }

    /// An image's bytes as an upload streams them from the archive (the last chunk checks the
    /// size and SHA-256 that validation recorded).
    static func streamed(_ image: BundleImage, from reader: BundleEntryReader) throws -> [UInt8] {
        var bytes: [UInt8] = []
        try reader.withImageChunks(image) { bytes.append(contentsOf: $0) }
        return bytes
    }

    @Test("small images are kept from validation with their validated bytes, within a bundle's budget")
    func smallImagesAreKeptFromValidation() async throws {
        try await withTemporaryDirectory { directory in
            // Each under the 256 KiB limit; 5 fit in the 1 MiB budget.
            let sample = SampleSession(
                seed: 11, shape: SampleSession.Shape().withImages(groups: 3, perGroup: 2, bytes: 200_000))
            var small = SampleSession.Shape()
            small.imageBytes = 4096
            let smallSample = SampleSession(seed: 12, shape: small)
            let (smallSource, packed) = try Self.layoutAndPack(smallSample, in: directory, name: "small")
            let zipped = directory.appendingPathComponent("small.zip")
            try await ArchiveProducer.zipDeflate.archive(smallSource, to: zipped)

            for path in [packed, zipped.path] {
                let bundle = try BundleInspector().inspect(path: path)
                for image in bundle.images.values {
                    #expect(image.bytes == smallSample.images[image.fileName], "\(path): \(image.fileName)")
                }
            }

            let large = try Self.layoutAndPack(sample, in: directory, name: "large").packed
            let bundle = try BundleInspector().inspect(path: large)
            let kept = bundle.images.values.filter { $0.bytes != nil }
            #expect(bundle.images.count > 5)
            #expect(kept.count == 5)
            for image in kept { #expect(image.bytes == sample.images[image.fileName]) }
        }
    }
}
