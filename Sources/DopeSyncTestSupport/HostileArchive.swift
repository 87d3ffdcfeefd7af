import Foundation

/// Archives no honest client writes — links, devices, absolute paths, `..`, duplicates — built
/// with Python's tarfile and zipfile, which will write anything they are told to.
public struct HostileEntry: Sendable {
    public enum Kind: String, Sendable {
        case file
        case directory = "dir"
        case symlink, hardlink
        case characterDevice = "chr"
        case blockDevice = "blk"
        case fifo
    }
    public var name: String
    public var kind: Kind
    public var data: [UInt8]
    public var linkTarget: String

    public static func file(_ name: String, _ data: [UInt8]) -> HostileEntry {
        HostileEntry(name: name, kind: .file, data: data, linkTarget: "")
    }
    public static func entry(_ name: String, _ kind: Kind, linkTarget: String = "") -> HostileEntry {
        HostileEntry(name: name, kind: kind, data: [], linkTarget: linkTarget)
    }
}

public enum HostileArchive {
    /// Writes `entries`, in order, as a gzip-compressed tar (`container: "tar"`) or a zip (`"zip"`).
    public static func write(_ entries: [HostileEntry], to output: URL, container: String = "tar") async throws {
        let specification = entries.map { entry -> [String: String] in
            [
                "name": entry.name, "kind": entry.kind.rawValue, "data": Data(entry.data).base64EncodedString(),
                "link": entry.linkTarget,
            ]
        }
        let json = try JSONSerialization.data(withJSONObject: specification)
        let script = """
            import base64, io, json, sys, tarfile, zipfile
            out, container = sys.argv[1], sys.argv[2]
            entries = json.load(sys.stdin)
            kinds = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                     "hardlink": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE}
            if container == "tar":
                with tarfile.open(out, "w:gz", format=tarfile.PAX_FORMAT) as t:
                    for e in entries:
                        data = base64.b64decode(e["data"])
                        info = tarfile.TarInfo(e["name"])
                        info.type = kinds[e["kind"]]
                        info.linkname = e["link"]
                        info.size = len(data) if e["kind"] == "file" else 0
                        info.mode = 0o755 if e["kind"] == "dir" else 0o644
                        t.addfile(info, io.BytesIO(data) if e["kind"] == "file" else None)
            else:
                with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
                    for e in entries:
                        info = zipfile.ZipInfo(e["name"])
                        mode = {"file": 0o100644, "dir": 0o040755, "symlink": 0o120777}[e["kind"]]
                        info.external_attr = mode << 16
                        payload = e["link"].encode() if e["kind"] == "symlink" else base64.b64decode(e["data"])
                        z.writestr(info, payload)
            """
        try await runProcess("python3", ["-c", script, output.path, container], stdin: json)
    }

    /// A tar.gz holding `session.json` followed by `unpackedBytes` of zeros: about 1 MB compressed
    /// for 1 GiB unpacked. Written by Python as a series of gzip members, as `cat` of gzip files
    /// makes one (RFC 1952; GNU gzip and libarchive read it as one stream): the tar headers, then
    /// one member of 1 MiB of zeros compressed once and written again for each MiB, then the
    /// rest and the end-of-archive blocks. No gigabyte is compressed or touches the disk: one
    /// stream at level 9 took seconds of CPU for each of the suite's bombs (BENCHMARKS.md).
    public static func writeBomb(to output: URL, unpackedBytes: Int, session: [UInt8]) async throws {
        let script = """
            import gzip, io, sys, tarfile
            out, size = sys.argv[1], int(sys.argv[2])
            session = sys.stdin.buffer.read()
            head = io.BytesIO()
            info = tarfile.TarInfo("session.json"); info.size = len(session)
            head.write(info.tobuf(tarfile.GNU_FORMAT)); head.write(session); head.write(bytes(-len(session) % 512))
            info = tarfile.TarInfo("images/zeros.jpg"); info.size = size
            head.write(info.tobuf(tarfile.GNU_FORMAT))
            mebibyte = gzip.compress(bytes(1 << 20), 9)
            with open(out, "wb") as f:
                f.write(gzip.compress(head.getvalue(), 9))
                for _ in range(size >> 20): f.write(mebibyte)
                f.write(gzip.compress(bytes((size & ((1 << 20) - 1)) + (-size % 512) + 1024), 9))
            """
        try await runProcess("python3", ["-c", script, output.path, String(unpackedBytes)], stdin: Data(session))
    }
}
