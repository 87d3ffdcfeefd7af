import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// Files built to hurt the reader, not to break a rule: each is judged at once, within the
/// bundle's budget, and refused with a reason that says what it is.
@Suite struct HostileFilesTests {
    @Test(
        "a gzip stream that unpacks into itself is refused at once as nested compression, by inspect too (exit 65)",
        .timeLimit(minutes: 3))
    func selfReproducingGzip() async throws {
        let path = HostileBundles.selfReproducingGzip.path
        let error = try #require(throws: BundleValidationError.self) { try BundleInspector().inspect(path: path) }
        #expect(error.code == .nestedCompression)
        #expect(
            error.errors[0].message == "gzip data inside the gzip stream: a bundle has at most one compression filter")

        let result = try await runBuilt("dopesync", ["inspect", path])
        #expect(result.status == 65)
        #expect(result.stdout.contains("[nested_compression]"), "\(result.stdout)")
        #expect(result.stdout.contains("one compression filter; 60 s + 1 s per 8 MiB of file"))  // the budget, printed
    }

    @Test(
        "a bundle compressed twice is refused, naming both streams",
        arguments: [
            ("gzip", "gzip"), ("xz", "xz"), ("zstd -q", "zstd"), ("bzip2", "bzip2"),
        ])
    func compressedTwice(outer: String, outerName: String) async throws {
        try await withTemporaryDirectory { directory in
            let bundle = try await HostileBundles.nested(
                SampleSession(seed: 5), outer: outer, in: directory, name: "twice")
            let error = try #require(throws: BundleValidationError.self) {
                try BundleInspector().inspect(path: bundle.path)
            }
            #expect(error.code == .nestedCompression)
            #expect(error.errors[0].message.hasPrefix("gzip data inside the \(outerName) stream"), "\(error)")
        }
    }

    @Test("a bundle still being read when its time budget runs out is refused as over_time_budget")
    func timeBudget() async throws {
        try await withTemporaryDirectory { directory in
            let source = directory.appendingPathComponent("s")
            let sample = SampleSession(seed: 6)
            try sample.writeLayout(to: source)
            let bundle = directory.appendingPathComponent("b.tgz")
            try await ArchiveProducer.gnuTarGzip.archive(source, to: bundle)
            var limits = BundleLimits()
            limits.readingSeconds = 0
            limits.readingBytesPerSecond = .max  // a budget of no time at all
            let error = try #require(throws: BundleValidationError.self) {
                try BundleInspector(limits: limits).inspect(path: bundle.path)
            }
            #expect(error.code == .overTimeBudget)
            #expect(error.errors[0].message.hasPrefix("reading took longer than its time budget of 0 s"))
            // The same bundle within the default budget is fine.
            #expect(try BundleInspector().inspect(path: bundle.path).images.count == sample.images.count)
        }
    }

    @Test("a run's stop ends a reading in progress, as reading_stopped (the bundle is not at fault)")
    func stopEndsReading() async throws {
        try await withTemporaryDirectory { directory in
            let bundle = directory.appendingPathComponent("huge.tar")
            try await HostileBundles.huge(SampleSession(seed: 8), gigabytes: 64, at: bundle)
            let stop = StopRequest()
            stop.request()
            let error = try #require(throws: BundleValidationError.self) {
                try BundleInspector().inspect(path: bundle.path, stop: stop)
            }
            #expect(error.code == .readingStopped)
        }
    }

    @Test(
        "pack refuses an image that grew or shrank since it was measured, instead of looping", .timeLimit(minutes: 3))
    func packedFileThatChangedSize() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("out.tar.gz").path
            let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            defer { close(descriptor) }
            let bytes = [UInt8](repeating: 7, count: 10_000)
            for declared: Int64 in [4_000, 20_000] {  // grew since measured; shrank since measured
                let error = try #require(throws: BundleError.self) {
                    try withTarGzipWriter(fileDescriptor: descriptor, culprit: path) { writer in
                        try writer.addFile(path: "images/a.jpg", size: declared, modificationTime: 0) { write in
                            try bytes.withUnsafeBytes { try write($0) }
                        }
                    }
                }
                #expect(error.culprit == "images/a.jpg")
                #expect(error.message.hasPrefix("changed while being packed"), "\(error)")
            }
        }
    }
}
