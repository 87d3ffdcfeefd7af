import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// How the archive reader names what stopped it, for real archives cut short and for files that
/// are no archive at all. Each cut is placed where libarchive reports it differently (a format
/// error while opening, a short tar header, a short entry, a compressed stream that ends early),
/// so the same code must come out whichever way libarchive says it.
@Suite struct ArchiveReaderTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        /// The code reading must stop with; nil when the file must read to its end.
        var code: BundleError.Code?
        var make: @Sendable (_ directory: URL) async throws -> URL

        var testDescription: String { name }
    }

    /// Bytes that do not compress, the same on every run.
    static func noise(count: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        return (0..<count).map { _ in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
    }

    /// GNU tar (with `flags` to compress) of `a.bin` (3000 bytes) and `b.bin` (100 000 bytes),
    /// then kept to `keep(size)` bytes. In the plain tar, `a.bin`'s data runs from byte 512 to
    /// 3512 and `b.bin`'s header from 3584 to 4096.
    static func tar(_ flags: [String] = [], keep: @escaping @Sendable (Int) -> Int = { $0 })
        -> @Sendable (URL) async throws
        -> URL
    {
        { directory in
            let source = directory.appendingPathComponent("s")
            try source.appendingPathComponent("a.bin").write(noise(count: 3000, seed: 1))
            try source.appendingPathComponent("b.bin").write(noise(count: 100_000, seed: 2))
            let output = directory.appendingPathComponent("bundle")
            try await runProcess("tar", flags + ["-cf", output.path, "a.bin", "b.bin"], in: source)
            let bytes = try Data(contentsOf: output)
            try output.write(bytes.prefix(keep(bytes.count)))
            return output
        }
    }

    static func file(_ bytes: [UInt8]) -> @Sendable (URL) async throws -> URL {
        { directory in
            let output = directory.appendingPathComponent("bundle")
            try output.write(bytes)
            return output
        }
    }

    static let cases: [Case] = [
        // No archive: libarchive's format detection finds neither tar nor zip.
        Case(name: "plain text", code: .notAnArchive, make: file(Array("this is not an archive\n".utf8))),
        Case(name: "an empty file", code: .notAnArchive, make: file([])),
        Case(name: "bytes of no format", code: .notAnArchive, make: file(noise(count: 4096, seed: 3))),

        // Cut short.
        Case(name: "a tar cut inside an entry's data", code: .truncated, make: tar(keep: { _ in 1500 })),
        Case(name: "a tar cut inside its second header", code: .truncated, make: tar(keep: { _ in 3684 })),
        Case(name: "a tar.gz cut 10 bytes before its end", code: .truncated, make: tar(["-z"], keep: { $0 - 10 })),
        Case(name: "a tar.gz cut in half", code: .truncated, make: tar(["-z"], keep: { $0 / 2 })),
        Case(name: "a tar.bz2 cut 10 bytes before its end", code: .truncated, make: tar(["-j"], keep: { $0 - 10 })),
        Case(name: "a tar.zst cut 10 bytes before its end", code: .truncated, make: tar(["--zstd"], keep: { $0 - 10 })),

        // The same archives whole: the cut is what the reader reports.
        Case(name: "a whole tar", code: nil, make: tar()),
        Case(name: "a whole tar.gz", code: nil, make: tar(["-z"])),
    ]

    /// Reads every byte of every entry, as a scan does; what stopped the reading, if anything did.
    static func readingError(_ path: String) -> BundleError? {
        do throws(BundleError) {
            try withArchiveReader(path: path) { reader throws(BundleError) in
                let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
                defer { buffer.deallocate() }
                while try reader.nextHeader() != nil {
                    while try reader.readData(into: buffer) > 0 {}
                }
            }
            return nil
        } catch {
            return error
        }
    }

    @Test("a truncated archive reads as truncated, a file of no archive format as not_an_archive", arguments: cases)
    func classification(_ testCase: Case) async throws {
        try await withTemporaryDirectory { directory in
            let path = try await testCase.make(directory).path
            let error = Self.readingError(path)
            #expect(error?.code == testCase.code, "\(error.map { "\($0)" } ?? "no error")")
            if let error { #expect(error.culprit == path) }
        }
    }
}

extension ArchiveReaderTests {
    /// What libarchive 3.6 reports (errno, message), as seen for the archives above and for damaged
    /// ones, or as its sources set it (EIO, the zip messages).
    static let libarchiveReports: [(errno: Int32, detail: String, opening: Bool, code: BundleError.Code)] = [
        // Plain text, an empty file, any stream cut before its format shows.
        (EILSEQ, "Unrecognized archive format", true, .notAnArchive),
        // The errno decides while opening, whatever the message.
        (EILSEQ, "", true, .notAnArchive),
        (EIO, "Premature end-of-file.", false, .truncated),
        (EINVAL, "Damaged tar archive", false, .damaged),
        // ARCHIVE_ERRNO_FILE_FORMAT past opening, and ARCHIVE_ERRNO_MISC (-1), say neither: the message does.
        (EILSEQ, "Truncated tar archive", false, .truncated),  // a tar cut inside a header
        (-1, "Truncated tar archive", false, .truncated),  // a tar cut inside an entry's data
        (-1, "truncated gzip input", false, .truncated),
        (-1, "truncated bzip2 input", false, .truncated),
        (EILSEQ, "Malformed 64-bit uncompressed size", false, .damaged),
        (-1, "Invalid central directory signature", false, .damaged),
        (-1, "gzip decompression failed", false, .damaged),
        // No errno and no message (a gzip stream missing part of its trailer).
        (0, "unknown error", false, .damaged),
    ]

    @Test("libarchive's errno decides where it tells the cases apart; its message only where it does not")
    func codeFromLibarchiveErrno() {
        for report in Self.libarchiveReports {
            let code = ArchiveReader.code(libarchiveErrno: report.errno, detail: report.detail, opening: report.opening)
            #expect(code == report.code, "errno \(report.errno), \"\(report.detail)\", opening: \(report.opening)")
        }
    }
}
