import DopeSync
import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Bundle names chosen by a producer: whatever they hold, every bundle stays visible, can fail,
/// and can neither forge a line nor drive a terminal in the log, `status` or a sidecar.
@Suite struct HostileNamesTests {
    /// A name that, printed raw, would end the log line, forge a "critical" one and clear the screen.
    static let forging = "evil\n2026-11-26T00:00:00+0000 critical dopesync: forged line\u{1B}[2J.tar.gz"

    /// Renames `source` to `folder/NAME`, NAME given as bytes (which may not be UTF-8).
    static func renameToByteName(
        _ source: String, toBytes name: [UInt8], in folder: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let path = (Array((folder + "/").utf8) + name + [0]).map { CChar(bitPattern: $0) }
        #expect(
            path.withUnsafeBufferPointer { Glibc.rename(source, $0.baseAddress!) } == 0, sourceLocation: sourceLocation)
    }

    /// Drops a file that is not an archive into `incoming/` under `name`: it fails validation.
    static func dropInvalid(_ name: String, into spool: Spool) throws {
        try Data("not an archive\n".utf8).write(to: URL(fileURLWithPath: spool.path(.incoming, name)))
    }

    @Test("a name with a newline and escape sequences is written \\xNN in the text log, in status and in its sidecar")
    func controlCharactersAreEscaped() async throws {
        try await withTemporarySpool { spool, _ in
            try Self.dropInvalid(Self.forging, into: spool)
            try await withDevServer { server in
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == 1, "\(output)")
                #expect(!output.contains("\u{1B}"), "a raw ESC reached the log")
                #expect(!output.split(separator: "\n").contains { $0.hasPrefix("2026-11-26T00:00:00+0000 critical") })
                #expect(output.contains(#"evil\x0a2026-11-26T00:00:00+0000 critical dopesync: forged line\x1b[2J"#))
            }
            let report = try await runBuilt("dopesync", ["status", "--spool", spool.root])
            #expect(report.status == 0)
            #expect(!report.stdout.contains("\u{1B}") && report.stdout.contains(#"evil\x0a2026"#), "\(report.stdout)")
            let sidecarText = try String(contentsOfFile: spool.sidecarPath(forFailed: Self.forging), encoding: .utf8)
            #expect(!sidecarText.contains("\u{1B}"), "\(sidecarText)")
            #expect(
                !sidecarText.contains("/processing/"), "the message names a path the bundle has left: \(sidecarText)")
            #expect(sidecarText.split(separator: "\n").allSatisfy { $0.contains(": ") }, "\(sidecarText)")
            #expect(ErrorSidecar(parsing: sidecarText)?.bundle == Self.forging, "the sidecar reads back as written")
        }
    }

    @Test(
        "a right-to-left override in a name is written \\u{202E} in the log, in status and in its sidecar, and reads back"
    )
    func invisibleFormatCharactersAreEscaped() async throws {
        // Shown raw, "photo-\u{202E}gpj.exe" reads as "photo-exe.jpg".
        let disguised = "photo-\u{202E}gpj.exe"
        try await withTemporarySpool { spool, _ in
            try Self.dropInvalid(disguised, into: spool)
            try await withDevServer { server in
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == 1, "\(output)")
                #expect(!output.contains("\u{202E}") && output.contains(#"photo-\u{202E}gpj.exe"#), "\(output)")
            }
            let report = try await runBuilt("dopesync", ["status", "--spool", spool.root])
            #expect(!report.stdout.contains("\u{202E}") && report.stdout.contains(#"photo-\u{202E}gpj.exe"#))
            let sidecarText = try String(contentsOfFile: spool.sidecarPath(forFailed: disguised), encoding: .utf8)
            #expect(!sidecarText.contains("\u{202E}"), "\(sidecarText)")
            #expect(ErrorSidecar(parsing: sidecarText)?.bundle == disguised, "the sidecar reads back as written")
        }
    }

    @Test(
        "names that are not UTF-8, not in normal form, or hold a newline: status counts each, and a run syncs each, none skipped, with or without RENAME_NOREPLACE (NFS)",
        arguments: RenameSupport.allCases)
    func oddNamesAreNeverSkipped(renames: RenameSupport) async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...3).map { SampleSession(seed: UInt64(3900 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            let notUTF8 = Array("bad-".utf8) + [0xFF, 0xFE] + Array(".tgz".utf8)
            let decomposed = "cafe\u{301}.tgz"  // NFD: e and a combining acute accent
            let newline = "two\nlines.tgz"
            for (sample, target) in zip(samples, [notUTF8, Array(decomposed.utf8), Array(newline.utf8)]) {
                Self.renameToByteName(
                    spool.path(.incoming, "\(sample.sessionID).tar.gz"), toBytes: target, in: spool.path(.incoming))
            }
            let status = try await runBuilt("dopesync", ["status", "--json", "--spool", spool.root])
            let folders = try #require(
                (try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["folders"]
                    as? [String: [String: Any]])
            #expect(folders["incoming"]?["count"] as? Int == 3, "\(folders)")
            // As on NFS: every no-replace rename refused with EINVAL, so each move links, then unlinks.
            let nfs: [String: String] =
                switch renames {
                case .local: [:]
                case .nfs: try await NoReplaceRenameRefused(in: directory).environment
                case .nfsUnlinkSentAgain:
                    try await NoReplaceRenameRefused(in: directory, unlinkOfNonASCIIReports: ESTALE).environment
                }
            try await withDevServer { server in
                let (code, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, environment: nfs)
                #expect(code == 0, "\(output)")
                #expect(output.contains(#"incoming/bad-\xff\xfe.tgz"#), "\(output)")
                let done = try spool.names(.done)
                #expect(
                    Set(done.map { Array($0.utf8) }) == [
                        Array("bad-%FF%FE.tgz".utf8), Array(decomposed.utf8), Array(newline.utf8),
                    ], "\(done)")
                #expect(try await server.createdCounts()["session"] == 3)
            }
        }
    }

    enum RenameSupport: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case local = "RENAME_NOREPLACE"
        /// Link, then unlink.
        case nfs = "NFS"
        /// Link, then an unlink of the name that is not UTF-8 that happens but reports ESTALE, as
        /// one sent again after the server restarted: the link must not be undone.
        case nfsUnlinkSentAgain = "NFS, the unlink sent again"
        var testDescription: String { rawValue }
    }

    @Test(
        "a name of 255 bytes taken in done/, and a name that is not UTF-8 whose escaped form passes 255 bytes: each bundle is synced under a name cut to fit, none left behind"
    )
    func namesThatOutgrowTheFileSystem() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...3).map { SampleSession(seed: UInt64(3950 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            let long = String(repeating: "ü", count: 123) + "-long.tgz"  // 255 bytes
            let notUTF8 = [UInt8](repeating: 0xFF, count: 200) + Array(".tgz".utf8)  // 600 bytes escaped
            // Each bundle waits beside the spool until it is placed in incoming/ under its name.
            for sample in samples {
                #expect(
                    rename(spool.path(.incoming, "\(sample.sessionID).tar.gz"), directory.path + "/\(sample.sessionID)")
                        == 0)
            }
            func place(_ sample: SampleSession, as name: [UInt8]) {
                Self.renameToByteName(directory.path + "/\(sample.sessionID)", toBytes: name, in: spool.path(.incoming))
            }
            place(samples[0], as: Array(long.utf8))
            try await withDevServer { server in
                let (first, firstOutput) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(first == 0, "\(firstOutput)")
                #expect(try spool.names(.done) == [long])
                // The same name again (another session), and a name that is not UTF-8.
                place(samples[1], as: Array(long.utf8))
                place(samples[2], as: notUTF8)
                let (second, secondOutput) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(second == 0, "\(secondOutput)")
                let done = try spool.names(.done)
                #expect(done.count == 3, "\(done)")
                // Escaped (600 bytes) and cut to 255 with its extension kept.
                #expect(done.contains(String(String(repeating: "%FF", count: 200).prefix(251)) + ".tgz"), "\(done)")
                #expect(done.contains(String(repeating: "ü", count: 123) + "-lo.1.tgz"), "\(done)")
                #expect(try spool.names(.incoming).isEmpty && spool.names(.processing).isEmpty)
                #expect(try await server.createdCounts()["session"] == 3)
            }
        }
    }

    @Test("a bundle named x.error is a bundle: status counts it as failed and requeue --all moves it back")
    func bundleNamedLikeASidecar() async throws {
        try await withTemporarySpool { spool, _ in
            try Self.dropInvalid("x.error", into: spool)
            try await withDevServer { server in
                #expect(await runWorker(spool, apiURL: server.baseURL, token: server.token).1 == .bundlesFailed)
            }
            #expect(try spool.names(.failed) == ["x.error", "x.error.error"])
            let report = try await runBuilt("dopesync", ["status", "--spool", spool.root, "--json"])
            #expect(
                report.stdout.contains(#""failed":1"#) || report.stdout.contains(#""failed" : 1"#), "\(report.stdout)")
            #expect(try await spool.list(.failed).map(\.name) == ["x.error"])
            let requeue = try await runBuilt("dopesync", ["requeue", "--all", "--spool", spool.root])
            #expect(requeue.status == 0, "\(requeue.stderr)")
            #expect(try spool.names(.incoming) == ["x.error"] && spool.names(.failed).isEmpty)
        }
    }

    @Test(
        "a name of 249 or 250 bytes still fails: a sidecar name too long is shortened, recorded, and status finds its reason",
        arguments: ["-long.tgz", "-longe.tgz"])
    func longNameStillFails(ending: String) async throws {
        try await withTemporarySpool { spool, _ in
            let name = String(repeating: "ü", count: 120) + ending  // 240 bytes and the ending
            #expect((249...250).contains(name.utf8.count))
            try Self.dropInvalid(name, into: spool)
            try await withDevServer { server in
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .bundlesFailed && summary.failed == 1)
            }
            #expect(try spool.names(.processing).isEmpty)
            let sidecarName = Spool.sidecarName(forFailed: name)
            #expect(sidecarName.utf8.count <= 255 && sidecarName.hasSuffix(".error"))
            #expect((sidecarName == name + ".error") == (name.utf8.count == 249), "\(sidecarName)")
            #expect(try spool.names(.failed).sorted() == [name, sidecarName].sorted())
            let sidecar = try #require(ErrorSidecar.read(from: spool.path(.failed, sidecarName)))
            #expect(sidecar.bundle == name && sidecar.reason.rawValue == "not_an_archive")
            let report = try await runBuilt("dopesync", ["status", "--spool", spool.root])
            #expect(report.stdout.contains("\(name)  not_an_archive"), "\(report.stdout)")
        }
    }

    @Test(
        "a producer's *.error bundle whose text looks like a sidecar, or is huge, is still a bundle; an orphan sidecar of the worker's is not",
        .enabled(if: geteuid() == 0, "needs root to give a file to a producer"))
    func sidecarLookalikes() async throws {
        try await withTemporaryDirectory { directory in
            let spool = Spool(root: directory.path)
            try await spool.create()
            let forged = "bundle: hidden.error\nfailed_at: 2026-01-01T00:00:00Z\nreason: x\n"
            try Data(forged.utf8).write(to: URL(fileURLWithPath: spool.path(.failed, "hidden.error")))
            #expect(chown(spool.path(.failed, "hidden.error"), 65533, 65533) == 0)
            // 128 KiB of a bundle named like a sidecar: never read whole.
            try Data(repeating: 0x41, count: 128 * 1024).write(
                to: URL(fileURLWithPath: spool.path(.failed, "big.error")))
            // A sidecar whose bundle was moved away by hand: the worker's own, naming itself.
            let orphan = ErrorSidecar(bundle: "gone.tgz", failedAt: Date(), reason: FailureReason(rawValue: "x"))
            try Data(orphan.rendered().utf8).write(to: URL(fileURLWithPath: spool.path(.failed, "gone.tgz.error")))
            #expect(try await spool.list(.failed).map(\.name).sorted() == ["big.error", "hidden.error"])
        }
    }

    @Test("a FIFO named *.error in failed/ does not hang status", .timeLimit(minutes: 3))
    func fifoInFailedDoesNotHangStatus() async throws {
        try await withTemporarySpool { spool, _ in
            #expect(mkfifo(spool.path(.failed, "x.error"), 0o600) == 0)
            let report = try await runBuilt("dopesync", ["status", "--spool", spool.root])
            #expect(report.status == 0, "\(report.stderr)")
        }
    }
}
