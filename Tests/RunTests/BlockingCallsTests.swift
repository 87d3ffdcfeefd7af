import DopeSyncTestSupport
import Foundation
import NIOCore
import NIOPosix
import SQLiteSupport
import Testing

@testable import DopeSync

/// No SQLite or libarchive call on an event loop's thread (`BlockingCalls` in ThreadRules): a
/// debug build stops at the first such call, and `dopesync run`, whose tasks run on NIO's event
/// loops, makes none. The tests build and spawn debug builds, so every `dopesync run` of the suite
/// holds to it; this suite shows the check is live, then runs every kind of work once.
@Suite struct BlockingCallsTests {
    #if DEBUG  // the check stops debug builds only
        @Test("a SQLite call on an event loop stops a debug build, naming the call")
        func sqliteOnALoopStops() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                try await MultiThreadedEventLoopGroup.singleton.any().submit {
                    _ = try SQLiteDatabase(path: ":memory:")
                }.get()
            }
            let errors = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
            #expect(errors.contains("SQLite: opening :memory: on an event loop thread"), "\(errors)")
        }

        @Test("a libarchive call on an event loop stops a debug build, naming the call")
        func libarchiveOnALoopStops() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                try await MultiThreadedEventLoopGroup.singleton.any().submit {
                    _ = try? ArchiveReader.opening(path: "/nonexistent/bundle.tar.gz", expected: nil)
                }.get()
            }
            let errors = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
            #expect(
                errors.contains("libarchive: opening /nonexistent/bundle.tar.gz on an event loop thread"), "\(errors)")
        }

    #endif

    @Test(
        "a whole `dopesync run` on NIO's event loops calls neither SQLite nor libarchive there: store, validation, images, checkpoints",
        .timeLimit(minutes: 1))
    func aRunKeepsBlockingCallsOffTheLoops() async throws {
        try await withTemporaryDirectory { directory in
            // Small bundles (validated in place where that may block) with images streamed from
            // the archive (over the 256 KiB kept from validation), and one over 1 MiB.
            var samples = (1...6).map {
                SampleSession(
                    seed: 900 + UInt64($0),
                    shape: SampleSession.Shape().withImages(groups: 1, perGroup: 1, bytes: 270_000))
            }
            samples.append(
                SampleSession(
                    seed: 950, shape: SampleSession.Shape().withImages(groups: 2, perGroup: 2, bytes: 1_200_000)))
            let spool = try makeSpool(in: directory, samples: samples)
            let sizes = try spool.names(.incoming).map {
                try FileManager.default.attributesOfItem(atPath: spool.path(.incoming, $0))[.size] as! Int64
            }
            #expect(sizes.filter { $0 < BundleUploader.inspectedOffTheLoopFrom }.count == 6, "\(sizes)")
            try await withDevServer { server in
                let run = try spawnRunLogging(spool, against: server, ["--concurrency", "4"])
                var output: [String] = []
                for await line in run.lines() { output.append(line) }
                let status = await run.finished()
                let broken = output.filter { $0.contains("on an event loop thread") }
                #expect(broken.isEmpty, "\(broken)")
                #expect(status == 0, "\(output.suffix(20).joined(separator: "\n"))")
                #expect(try spool.names(.done).count == samples.count)
            }
        }
    }
}
