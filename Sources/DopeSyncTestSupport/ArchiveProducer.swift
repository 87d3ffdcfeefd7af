import Crypto
import Foundation

/// Real archive producers — the tools clients really use — so the reader is tested against
/// what GNU tar, bsdtar (libarchive), Info-ZIP and Python's tarfile/zipfile actually write.
public enum ArchiveProducer: String, CaseIterable, Sendable, CustomStringConvertible {
    case gnuTar = "GNU tar (uncompressed)"
    case gnuTarGzip = "GNU tar + gzip"
    case gnuTarBzip2 = "GNU tar + bzip2"
    case gnuTarXz = "GNU tar + xz"
    case gnuTarZstd = "GNU tar + zstd"
    case bsdtarGzip = "bsdtar (libarchive) + gzip"
    case bsdtarPaxZstd = "bsdtar (libarchive) pax + zstd"
    case bsdtarZip = "bsdtar (libarchive) zip"
    case zipDeflate = "Info-ZIP deflate"
    case zipStored = "Info-ZIP stored"
    case pythonTarXz = "Python tarfile + xz"
    case pythonZip = "Python zipfile deflate"

    public var description: String { rawValue }

    /// How the layout is placed in the archive.
    public enum Layout: String, Sendable, CaseIterable {
        /// `session.json`, `images/a.jpg`
        case plain
        /// `./session.json`, `./images/a.jpg` (what `tar -C dir -czf out .` writes)
        case dotSlash
        /// `mysession/session.json` (what `tar czf out mysession/` writes)
        case topFolder
    }

    /// Archives the folder `source` into `output` with this producer.
    public func archive(_ source: URL, to output: URL, layout: Layout = .plain) async throws {
        let parent = source.deletingLastPathComponent()
        let folder = source.lastPathComponent
        let names = try FileManager.default.contentsOfDirectory(atPath: source.path).sorted()
        let (directory, members): (URL, [String]) =
            switch layout {
            case .plain: (source, names)
            case .dotSlash: (source, ["."])
            case .topFolder: (parent, [folder])
            }
        switch self {
        case .gnuTar: try await runProcess("tar", ["-cf", output.path] + members, in: directory)
        case .gnuTarGzip: try await runProcess("tar", ["-czf", output.path] + members, in: directory)
        case .gnuTarBzip2: try await runProcess("tar", ["-cjf", output.path] + members, in: directory)
        case .gnuTarXz: try await runProcess("tar", ["-cJf", output.path] + members, in: directory)
        case .gnuTarZstd: try await runProcess("tar", ["--zstd", "-cf", output.path] + members, in: directory)
        case .bsdtarGzip: try await runProcess("bsdtar", ["-czf", output.path] + members, in: directory)
        case .bsdtarPaxZstd:
            try await runProcess("bsdtar", ["--format", "pax", "--zstd", "-cf", output.path] + members, in: directory)
        case .bsdtarZip:
            try await runProcess("bsdtar", ["--format", "zip", "-cf", output.path] + members, in: directory)
        case .zipDeflate: try await runProcess("zip", ["-qr", output.path] + members, in: directory)
        case .zipStored: try await runProcess("zip", ["-qr0", output.path] + members, in: directory)
        case .pythonTarXz, .pythonZip:
            let script = """
                import os, sys, tarfile, zipfile
                out, kind, members = sys.argv[1], sys.argv[2], sys.argv[3:]
                if kind == "tar":
                    with tarfile.open(out, "w:xz") as t:
                        for m in members: t.add(m)
                else:
                    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
                        for m in members:
                            if os.path.isdir(m):
                                for root, dirs, files in os.walk(m):
                                    for f in sorted(files): z.write(os.path.join(root, f))
                            else:
                                z.write(m)
                """
            try await runProcess(
                "python3", ["-c", script, output.path, self == .pythonTarXz ? "tar" : "zip"] + members, in: directory)
        }
    }
}

/// Hex SHA-256 of `bytes`, as manifests write it.
public func sha256Hex(_ bytes: some Sequence<UInt8>) -> String {
    SHA256.hash(data: Array(bytes)).map { String(format: "%02x", $0) }.joined()
}
