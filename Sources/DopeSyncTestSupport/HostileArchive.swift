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

    /// A tar.gz holding `session.json` followed by `size` bytes of zeros: about 1 MB compressed
    /// for 1 GiB unpacked. Streamed by Python, so no gigabyte ever touches the disk.
    public static func writeBomb(to output: URL, unpackedBytes: Int, session: [UInt8]) async throws {
        let script = """
            import io, sys, tarfile
            out, size = sys.argv[1], int(sys.argv[2])
            session = sys.stdin.buffer.read()
            class Zeros(io.RawIOBase):
                def __init__(self, n): self.left = n
                def readinto(self, b):
                    n = min(len(b), self.left); b[:n] = bytes(n); self.left -= n; return n
                def readable(self): return True
            with tarfile.open(out, "w:gz", compresslevel=9) as t:
                info = tarfile.TarInfo("session.json"); info.size = len(session)
                t.addfile(info, io.BytesIO(session))
                info = tarfile.TarInfo("images/zeros.jpg"); info.size = size
                t.addfile(info, io.BufferedReader(Zeros(size), 1 << 20))
            """
        try await runProcess("python3", ["-c", script, output.path, String(unpackedBytes)], stdin: Data(session))
    }
}
