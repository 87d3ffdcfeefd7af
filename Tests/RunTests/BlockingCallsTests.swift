import DopeSyncTestSupport
import Foundation
import Logging
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
    /// The two calls the check must stop, each made on an event loop by a child run of this test
    /// binary (``BlockingCallsProbe``). Not Swift Testing's exit tests: their waiter thread waits
    /// for any child of the process and spins on one it does not own (a test's finished `dopesync`
    /// not yet reaped), and then never sees its own child end.
    static let probes = [
        ("sqlite", "SQLite: opening :memory: on an event loop thread"),
        ("libarchive", "libarchive: opening /nonexistent/bundle.tar.gz on an event loop thread"),
        ("spool", "spool: listing /nonexistent/incoming on an event loop thread"),
    ]

    #if DEBUG  // the check stops debug builds only
        @Test(
            "a SQLite, libarchive or spool call on an event loop stops a debug build, naming the call",
            arguments: probes)
        func aBlockingCallOnALoopStops(probe: String, message: String) async throws {
            let child = try await runProcess(
                testRunner.path, ["--testing-library", "swift-testing", "--filter", "BlockingCallsProbe"],
                environment: [BlockingCallsProbe.variable: probe, "SWIFT_BACKTRACE": "enable=no"], allowFailure: true)
            #expect(child.status != 0, "the child went on past the call")
            #expect(child.stderr.contains(message) || child.stdout.contains(message), "\(child.stderr)")
        }
    #endif

    /// `Worker.run` prefers ``UploadExecutor/loops``; in-process runs rely on everything under it
    /// landing there, as it does in `dopesync run`, so that the suite takes production's path.
    @Test("under the upload executor, child tasks, actor calls and the run's unstructured tasks run on NIO's loops")
    func theUploadExecutorKeepsARunOnTheLoops() async {
        let places = await withTaskExecutorPreference(UploadExecutor.loops) { () async -> [Bool] in
            let here = await Self.onALoop()
            let child = await withTaskGroup(of: Bool.self) { group in
                group.addTask { await Self.onALoop() }
                return await group.next() ?? false
            }
            let actor = await LoopProbe().onALoop()
            // An unstructured task inherits no preference: the run's own name the loops.
            let unstructured = await Task(executorPreference: UploadExecutor.loops) { await Self.onALoop() }.value
            let unnamed = await Task { await Self.onALoop() }.value
            return [here, child, actor, unstructured, !unnamed]
        }
        #expect(places == [true, true, true, true, true], "here, child, actor, unstructured, unnamed")
        #expect(await Self.onALoop() == false, "the test itself is on the cooperative pool")
    }

    nonisolated static func onALoop() async -> Bool { MultiThreadedEventLoopGroup.currentEventLoop != nil }

    @Test("an in-process `Worker.run` is on NIO's loops, as `dopesync run` is: it logs a bundle's failure from one")
    func anInProcessRunIsOnTheLoops() async throws {
        try await withTemporarySpool { spool, _ in
            try Data("not an archive".utf8).write(to: URL(fileURLWithPath: spool.path(.incoming, "bad.tar.gz")))
            let (places, place) = AsyncStream.makeStream(of: Bool.self)
            let logger = Logger(label: "test") { _ in
                MessageHandler { message in
                    if message == "bundle is invalid" {
                        place.yield(MultiThreadedEventLoopGroup.currentEventLoop != nil)
                    }
                }
            }
            try await withDevServer { server in
                var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                options.minAge = .zero
                options.minFreeSpace = .bytes(0)
                _ = await Worker(options: options, logger: logger).run()
            }
            place.finish()
            var seen: [Bool] = []
            for await onLoop in places { seen.append(onLoop) }
            #expect(seen == [true], "logged on a loop: \(seen)")
        }
    }

    @Test(
        "a whole `dopesync run` on NIO's event loops calls neither SQLite nor libarchive there: store, validation, images, checkpoints",
        .timeLimit(minutes: 3))
    func aRunKeepsBlockingCallsOffTheLoops() async throws {
        try await withTemporaryDirectory { directory in
            // Small bundles with images streamed from
            // the archive (over the 256 KiB kept from validation), and one over 1 MiB.
            var samples = (1...6).map {
                SampleSession(
                    seed: 900 + UInt64($0),
                    shape: SampleSession.Shape().withImages(groups: 1, perGroup: 1, bytes: 270_000))
            }
            samples.append(
                SampleSession(
                    seed: 950, shape: SampleSession.Shape().withImages(groups: 2, perGroup: 2, bytes: 1_200_000)))
            let spool = try await makeSpool(in: directory, samples: samples)
            let sizes = try spool.names(.incoming).map {
                try FileManager.default.attributesOfItem(atPath: spool.path(.incoming, $0))[.size] as! Int64
            }
            #expect(sizes.filter { $0 < 1 << 20 }.count == 6, "\(sizes)")
            try await withDevServer { server in
                let run = try await spawnRunLogging(spool, against: server, ["--concurrency", "4"])
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

/// A default actor: it runs on the executor the calling task prefers.
private actor LoopProbe {
    func onALoop() -> Bool { MultiThreadedEventLoopGroup.currentEventLoop != nil }
}

/// What a child run of this binary does for ``BlockingCallsTests``: with
/// `DOPESYNC_BLOCKING_CALL_PROBE` set, one blocking call on an event loop, which a debug build
/// stops; without it (every ordinary run of the suite) nothing, and it is skipped.
@Suite struct BlockingCallsProbe {
    static let variable = "DOPESYNC_BLOCKING_CALL_PROBE"

    @Test(.enabled(if: ProcessInfo.processInfo.environment[variable] != nil))
    func blockingCallOnALoop() async throws {
        let probe = ProcessInfo.processInfo.environment[Self.variable]
        try await MultiThreadedEventLoopGroup.singleton.any().submit {
            switch probe {
            case "sqlite": _ = try SQLiteDatabase(path: ":memory:")
            case "spool": _ = try? Spool(root: "/nonexistent").list(.incoming)
            default: _ = try? ArchiveReader.opening(path: "/nonexistent/bundle.tar.gz", expected: nil)
            }
        }.get()
    }
}
