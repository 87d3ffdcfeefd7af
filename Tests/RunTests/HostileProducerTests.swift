import Crypto
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Synchronization
import Testing

@testable import DopeSync

#if canImport(Glibc)
    import Glibc
#endif

/// A producer who knows how the worker frames its requests, or who still writes to a bundle it
/// handed over: whatever it does costs only its own bundle, and nothing forged is recorded.
@Suite struct HostileProducerTests {
    /// `sample` as an uncompressed GNU tar in `spool`'s `incoming/` (so its bytes can be found and
    /// rewritten in place), named `name`.
    static func packUncompressed(_ sample: SampleSession, named name: String, into spool: Spool, scratch: URL)
        async throws
    {
        let source = scratch.appendingPathComponent("layout-\(name)")
        try sample.writeLayout(to: source)
        try await ArchiveProducer.gnuTar.archive(source, to: URL(fileURLWithPath: spool.path(.incoming, name)))
    }

    /// The boundary an image step of `sample` is framed with when its bytes give no reason to
    /// choose another: what a producer can compute from the bundle's own ids.
    static func predictableBoundary(_ sample: SampleSession, groupID: String, fileName: String) -> String {
        let key = UploadPlan.idempotencyKey(sessionID: sample.sessionID, stepKey: "image:\(groupID):photo:\(fileName)")
        return "dopesync-" + String(SHA256.hash(data: Array(key.utf8)).hexString.prefix(32))
    }

    /// The sample with its first group's photo holding, in the middle, the closing delimiter of the
    /// request it will be sent in: `size` bytes in all (above 256 KiB it is streamed).
    static func sampleWithBoundaryInImage(seed: UInt64, size: Int) -> (SampleSession, fileName: String) {
        var shape = SampleSession.Shape()
        shape.imageBytes = size
        var sample = SampleSession(seed: seed, shape: shape)
        let groups = sample.json["groupEntries"] as! [[String: any Sendable]]  // the sample's own document
        let groupID = groups[0]["id"] as! String
        let fileName = (groups[0]["imageFileNames"] as! [String])[0]
        let delimiter = Array("\r\n--\(predictableBoundary(sample, groupID: groupID, fileName: fileName))--\r\n".utf8)
        var bytes = sample.images[fileName]!
        bytes.replaceSubrange(size / 2..<(size / 2 + delimiter.count), with: delimiter)
        sample.images[fileName] = bytes
        return (sample, fileName)
    }

    @Test("the boundary search finds a pattern wherever chunks split it, and nothing where it is absent")
    func streamingSearchAcrossChunks() {
        let pattern = Array("--dopesync-".utf8)
        var haystack = [UInt8](repeating: UInt8(ascii: "-"), count: 64)
        haystack.replaceSubrange(30..<(30 + pattern.count), with: pattern)
        for split in 0...haystack.count {
            for second in split...haystack.count {
                var search = StreamingSearch(pattern)
                search.update(Array(haystack[..<split]))
                search.update(Array(haystack[split..<second]))
                search.update(Array(haystack[second...]))
                #expect(search.found, "split at \(split) and \(second)")
            }
        }
        var absent = StreamingSearch(pattern)
        for byte in Array("--dopesync_--dopesyn-dopesync-".utf8) { absent.update([byte]) }
        #expect(!absent.found)
    }

    @Test(
        "an image that holds its predictable multipart boundary is stored whole (size and SHA-256 as validated), in memory or streamed",
        arguments: [4096, 400 * 1024])
    func boundaryInImageCannotCutIt(size: Int) async throws {
        try await withTemporaryDirectory { directory in
            let (sample, fileName) = Self.sampleWithBoundaryInImage(seed: 2400 + UInt64(size), size: size)
            let spool = try await makeSpool(in: directory, samples: [sample])
            try await withDevServer { server in
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .success && summary.done == 1)
                let stored = try await server.sessionTree(clientID: sample.sessionID).images
                let image = try #require(stored.first { $0.fileName == fileName })
                #expect(image.sha256 == sha256Hex(sample.images[fileName]!), "the server stored other bytes")
                #expect(stored.count == sample.images.count)
            }
        }
    }

    @Test("a file name with CR/LF is refused at validation, naming the field; nothing of it is sent")
    func fileNameWithLineBreakIsRefused() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 2410).renamingImages(to: ["x.jpg\r\nX-Injected: yes"])
            let spool = Spool(root: directory.appendingPathComponent("spool").path)
            try await spool.create()
            try await Self.packUncompressed(sample, named: "injected.tar", into: spool, scratch: directory)
            try await withDevServer { server in
                let (_, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .bundlesFailed)
                let sidecar = try #require(ErrorSidecar.read(from: spool.sidecarPath(forFailed: "injected.tar")))
                #expect(sidecar.reason.rawValue == "invalid_session", "\(sidecar)")
                #expect(sidecar.message?.contains("imageFileNames") == true, "\(sidecar)")
                #expect(sidecar.message?.contains("control character") == true, "\(sidecar)")
                #expect(try await server.requestLog().filter { $0.path.hasPrefix("/api/") }.isEmpty)
            }
        }
    }

    @Test(
        "an image rewritten in place after validation fails its bundle as changed_after_validation; the API is not blamed, the others sync"
    )
    func rewrittenAfterValidation() async throws {
        try await withTemporaryDirectory { directory in
            var shape = SampleSession.Shape()
            shape.imageBytes = 400 * 1024  // streamed from the archive, not kept from validation
            let edited = SampleSession(seed: 2420, shape: shape)
            let others = (1...2).map { SampleSession(seed: 2420 + UInt64($0)) }
            let spool = try await makeSpool(in: directory, samples: others)
            try await Self.packUncompressed(edited, named: "edited.tar", into: spool, scratch: directory)
            let (name, bytes) = edited.images.sorted { $0.key < $1.key }[0]
            let rewritten = Mutex(false)
            var configuration = DevServerConfiguration()
            // The producer writes into its bundle once it has been validated: when its session
            // arrives. (A descriptor kept from before the claim needs no access to processing/.)
            configuration.onRequest = { method, path in
                guard method == "POST", path == "/api/sessions", !rewritten.withLock({ $0 }) else { return }
                let file = spool.path(.processing, "edited.tar")
                guard let archive = FileManager.default.contents(atPath: file),
                    let offset = Array(archive).firstRange(of: bytes[1000..<1064])?.lowerBound
                else { return }
                let descriptor = open(file, O_WRONLY)
                defer { close(descriptor) }
                let forged = [UInt8](repeating: 0x41, count: 4096)
                if pwrite(descriptor, forged, forged.count, off_t(offset)) == forged.count {
                    rewritten.withLock { $0 = true }
                }
            }
            try await withDevServer(configuration) { server in
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(rewritten.withLock { $0 }, "the test did not find the image in the archive")
                #expect(status == .bundlesFailed, "exit 1, not 75: the breaker must not open")
                #expect(summary.done == others.count && summary.failed == 1)
                let sidecar = try #require(ErrorSidecar.read(from: spool.sidecarPath(forFailed: "edited.tar")))
                #expect(sidecar.reason.rawValue == "changed_after_validation", "\(sidecar)")
                let stored = try await server.sessionTree(clientID: edited.sessionID).images
                #expect(!stored.contains { $0.fileName == name }, "a partial image was stored")
            }
        }
    }

    @Test("a symlink, a FIFO or another file put at a claimed path is never read: refused at once, without waiting")
    func replacedAfterClaimIsNotRead() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 2430)
            let spool = Spool(root: directory.appendingPathComponent("spool").path)
            try await spool.create()
            try await Self.packUncompressed(sample, named: "b.tar", into: spool, scratch: directory)
            try await Self.packUncompressed(
                SampleSession(seed: 2431), named: "other.tar", into: spool, scratch: directory)
            let entry = try #require(try await spool.scan(minAge: .zero).first { $0.name == "b.tar" })
            let claimed = try #require(try await spool.claim(entry))
            #expect(throws: Never.self) {
                try BundleInspector().inspect(path: claimed.path, expected: claimed.identity)
            }
            let aside = directory.appendingPathComponent("aside.tar").path
            #expect(rename(claimed.path, aside) == 0)
            let fifo = directory.appendingPathComponent("fifo").path
            #expect(mkfifo(fifo, 0o600) == 0)
            let replacements: [(String, () -> Int32)] = [
                ("a symlink to the bundle itself", { symlink(aside, claimed.path) }),
                ("a FIFO", { rename(fifo, claimed.path) }),
                ("another valid bundle", { rename(spool.path(.incoming, "other.tar"), claimed.path) }),
            ]
            for (what, replace) in replacements {
                unlink(claimed.path)
                #expect(replace() == 0, "\(what)")
                let error = try #require(throws: BundleValidationError.self, "\(what)") {
                    try BundleInspector().inspect(path: claimed.path, expected: claimed.identity)
                }
                #expect(error.code == .replacedAfterClaim, "\(what): \(error)")
            }
        }
    }

    @Test(
        "a FIFO moved over a claimed bundle mid-run is never opened: the run ends, the others sync, nothing of that image is created",
        .timeLimit(minutes: 3))
    func fifoSwappedInMidRun() async throws {
        try await withTemporaryDirectory { directory in
            var shape = SampleSession.Shape()
            shape.imageBytes = 400 * 1024  // streamed: the archive is opened again for the images
            let swapped = SampleSession(seed: 2440, shape: shape)
            let others = (1...2).map { SampleSession(seed: 2440 + UInt64($0)) }
            let spool = try await makeSpool(in: directory, samples: others)
            try await Self.packUncompressed(swapped, named: "swapped.tar", into: spool, scratch: directory)
            let fifo = directory.appendingPathComponent("fifo").path
            #expect(mkfifo(fifo, 0o600) == 0)
            let done = Mutex(false)
            var configuration = DevServerConfiguration()
            // Once validated (its session arrives), the bundle's path becomes a FIFO nobody writes to.
            configuration.onRequest = { method, path in
                guard method == "POST", path == "/api/sessions", !done.withLock({ $0 }),
                    FileManager.default.fileExists(atPath: spool.path(.processing, "swapped.tar"))
                else { return }
                if rename(fifo, spool.path(.processing, "swapped.tar")) == 0 { done.withLock { $0 = true } }
            }
            try await withDevServer(configuration) { server in
                let (summary, _) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(done.withLock { $0 }, "the FIFO was not swapped in")
                #expect(summary.done == others.count, "\(summary.line)")
                #expect(try spool.names(.processing) == ["swapped.tar"], "the FIFO is left where it was put")
                let tree = try await server.sessionTree(clientID: swapped.sessionID)
                #expect(tree.images.isEmpty, "an image was sent from something other than the claimed file")
            }
        }
    }
}
