import Foundation

/// Bundles that attack the reader rather than break a rule: streams nested in streams, and a
/// huge one that takes long to read. Made with the real tools, or kept as files in the tests.
public enum HostileBundles {
    /// `Tests/BundleTests/Fixtures/hostile/NAME`: files kept in the repository.
    public static func fixture(_ name: String, file: StaticString = #filePath) -> URL {
        var folder = URL(fileURLWithPath: "\(file)")
        while folder.lastPathComponent != "Sources" && folder.path != "/" { folder.deleteLastPathComponent() }
        return folder.deletingLastPathComponent().appendingPathComponent("Tests/BundleTests/Fixtures/hostile/\(name)")
    }

    /// A gzip stream that unpacks into itself, byte for byte, CRC included (made by
    /// `Scripts/make-gzip-quine.py`). libarchive's own filter detection would stack gzip readers
    /// on it until its limit; a reader without one, for ever.
    public static var selfReproducingGzip: URL { fixture("recursive.gz") }

    /// `make fuzz`'s first finding: a damaged zip (no central directory, read front to back) whose
    /// first file entry has an empty name, then a valid bundle. Validation passes over that entry;
    /// streaming an image back once counted it and found the wrong entry. Its images are small
    /// enough to be sent from memory, so only the fuzz target (which streams every image) saw it;
    /// with images over 256 KiB a valid bundle failed mid-upload as changed.
    public static var zipEntryWithoutAName: URL { fixture("zip-entry-without-a-name.zip") }

    /// `make fuzz`'s second finding: a damaged zip, read front to back, with an entry whose data
    /// libarchive reads through but cannot skip ("reading the next entry: unknown error").
    /// Validation reads every entry's data and accepts it; streaming an image back once skipped
    /// the entries before it, and failed where validation had not.
    public static var zipEntryThatCannotBeSkipped: URL { fixture("zip-stored-entry-skipped-unreadably.zip") }

    /// A valid tar.gz bundle of `sample`, compressed once more by `outer` (`gzip`, `xz`, `zstd`, `bzip2`).
    public static func nested(_ sample: SampleSession, outer: String, in directory: URL, name: String) async throws
        -> URL
    {
        let source = directory.appendingPathComponent("src-\(name)")
        try sample.writeLayout(to: source)
        let inner = directory.appendingPathComponent("\(name).inner.tgz")
        try await ArchiveProducer.gnuTarGzip.archive(source, to: inner)
        let output = directory.appendingPathComponent(name)
        try await runProcess("sh", ["-c", "\(outer) -c \"$1\" > \"$2\"", "sh", inner.path, output.path])
        return output
    }

    /// An uncompressed tar whose one image is `gigabytes` GiB of zeros, written sparse: it takes
    /// no disk, but reading and hashing it takes many seconds. Its `session.json` names the image,
    /// which is not a JPEG, so the bundle would fail validation if it were ever read to the end.
    public static func huge(_ sample: SampleSession, gigabytes: Int, at output: URL) async throws {
        var session = sample
        var groups = session.json["groupEntries"] as! [[String: any Sendable]]
        groups[0]["imageFileNames"] = ["huge.jpg"]
        session.json["groupEntries"] = groups
        let script = """
            import io, sys, tarfile
            out, session, size = sys.argv[1], sys.stdin.buffer.read(), int(sys.argv[2])
            with open(out, "wb") as f:
                info = tarfile.TarInfo("session.json"); info.size = len(session)
                f.write(info.tobuf(tarfile.GNU_FORMAT)); f.write(session); f.write(b"\\0" * (-len(session) % 512))
                info = tarfile.TarInfo("images/huge.jpg"); info.size = size
                f.write(info.tobuf(tarfile.GNU_FORMAT))
                f.seek(size, 1)  # a hole: zeros that take no disk
                f.write(b"\\0" * 1024)  # the end-of-archive blocks
            """
        try await runProcess(
            "python3", ["-c", script, output.path, "\(Int64(gigabytes) << 30)"], stdin: Data(session.sessionBytes))
    }
}
