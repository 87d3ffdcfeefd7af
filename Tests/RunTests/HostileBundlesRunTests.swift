import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import SQLiteSupport
import Testing

@testable import DopeSync

#if canImport(Glibc)
    import Glibc
#endif

/// Hostile bundles in a real spool: each ends up in `failed/` with its reason, the others are
/// synced in the same run, and a bundle that kills or stalls the reader is never claimed for ever.
@Suite struct HostileBundlesRunTests {
    @Test(
        "one run moves the self-reproducing gzip, gzip in gzip and xz in gzip to failed/ and syncs the others",
        .timeLimit(minutes: 3))
    func hostileBundlesFailAndOthersSync() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...3).map { SampleSession(seed: 300 + UInt64($0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            try FileManager.default.copyItem(
                at: HostileBundles.selfReproducingGzip, to: URL(fileURLWithPath: spool.path(.incoming, "quine.gz")))
            for (outer, name) in [("gzip", "gzip-in-gzip"), ("xz", "gzip-in-xz")] {
                let bundle = try await HostileBundles.nested(
                    SampleSession(seed: 310), outer: outer, in: directory, name: name)
                try FileManager.default.moveItem(atPath: bundle.path, toPath: spool.path(.incoming, name))
            }
            try await withDevServer { server in
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .bundlesFailed)
                #expect(summary.done == 3 && summary.failed == 3)
                #expect(
                    try spool.names(.failed) == [
                        "gzip-in-gzip", "gzip-in-gzip.error", "gzip-in-xz", "gzip-in-xz.error", "quine.gz",
                        "quine.gz.error",
                    ])
                for name in ["gzip-in-gzip", "gzip-in-xz", "quine.gz"] {
                    let sidecar = try String(contentsOfFile: spool.path(.failed, name + ".error"), encoding: .utf8)
                    #expect(sidecar.contains("reason: nested_compression"), "\(sidecar)")
                }
            }
        }
    }

    @Test(
        "SIGTERM while a huge bundle is being read: the run exits within seconds and gives the bundle back",
        .timeLimit(minutes: 3))
    func sigtermDuringReading() async throws {
        try await withTemporaryDirectory { directory in
            let spool = Spool(root: directory.appendingPathComponent("spool").path)
            try await spool.create()
            // 64 GiB of zeros to hash: many minutes of reading, so only the stop can end it soon.
            try await HostileBundles.huge(
                SampleSession(seed: 11), gigabytes: 64, at: URL(fileURLWithPath: spool.path(.incoming, "huge.tar")))
            try await withDevServer { server in
                let run = try await spawnRunLogging(spool, against: server)
                #expect(await run.firstLine(containing: "bundle.name=huge.tar", "reading the bundle") != nil)
                let signalled = ContinuousClock.now
                run.kill(SIGTERM)
                let status = await run.finished()
                let took = ContinuousClock.now - signalled
                #expect(status == 0)
                #expect(took < .seconds(10), "exited \(took) after SIGTERM")
                #expect(try spool.names(.incoming) == ["huge.tar"])
                let failed = try spool.names(.failed)
                let sidecars = try failed.map { try String(contentsOfFile: spool.path(.failed, $0), encoding: .utf8) }
                #expect(failed.isEmpty, "\(sidecars)")
            }
        }
    }

    @Test(
        "a bundle read harmlessly in a child, yet whose readings in the worker were cut short 3 times, goes to failed/ saying so, instead of ending every run"
    )
    func aBundleReadAloneUnharmedButCutShortTooOftenFails() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 14)])
            let name = try #require(try spool.names(.incoming).first)
            // Three readings in the worker that never ended (its process died each time, the run's
            // OOM kill say): the reading mark set, then counted twice.
            let store = try CheckpointStore(spool: spool)
            for _ in 0..<3 { _ = try store.beginReading(name: name) }
            store.close()
            try await withDevServer { server in
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == 1, "\(output)")
                #expect(output.contains("reading it in a separate process first"), "\(output)")
                #expect(try spool.names(.failed) == [name, name + ".error"])
                let sidecar = try String(contentsOfFile: spool.path(.failed, name + ".error"), encoding: .utf8)
                #expect(sidecar.contains("reason: reader_crashed"), "\(sidecar)")
                #expect(sidecar.contains("lower --concurrency"), "\(sidecar)")
                #expect(try await server.createdCounts().values.reduce(0, +) == 0)
            }
        }
    }

    @Test(
        "a bundle whose reading killed the run is read next time in a child process; killed there too, it goes to failed/ as reader_crashed",
        .timeLimit(minutes: 3))
    func readerKillingBundleIsIsolatedThenFailed() async throws {
        try await withTemporaryDirectory { directory in
            // The huge bundle first: it arrives first (a run takes bundles in the order they arrived).
            let spool = try await makeSpool(in: directory, samples: [])
            try await HostileBundles.huge(
                SampleSession(seed: 13), gigabytes: 64, at: URL(fileURLWithPath: spool.path(.incoming, "huge.tar")))
            try pack(SampleSession(seed: 12), into: spool, scratch: directory)
            try await withDevServer { server in
                let first = try await spawnRunLogging(spool, against: server, ["--concurrency", "1"])
                #expect(await first.firstLine(containing: "bundle.name=huge.tar", "reading the bundle") != nil)
                first.kill(SIGKILL)  // what a crash, the OOM killer, or a timer's kill after a hang does
                #expect(await first.finished() == 128 + SIGKILL)
                #expect(try spool.names(.processing) == ["huge.tar"])

                // The next run reads the orphan in a child first; that child dies as the run did.
                let second = try await spawnRunLogging(spool, against: server, ["--concurrency", "1"])
                let line = await second.firstLine(containing: "reading the bundle in a separate process")
                let child = try #require(line?.firstMatch(of: /reader\.pid=(\d+)/).flatMap { pid_t($0.1) })
                kill(child, SIGKILL)
                #expect(await second.finished() == 1)
                #expect(try spool.names(.failed) == ["huge.tar", "huge.tar.error"])
                #expect(try spool.names(.done).count == 1)
                let sidecar = try String(contentsOfFile: spool.path(.failed, "huge.tar.error"), encoding: .utf8)
                #expect(sidecar.contains("reason: reader_crashed"), "\(sidecar)")
                #expect(sidecar.contains("signal 9"))

                // requeue gives it a fresh start: no reading counted against it.
                let requeue = try await runBuilt("dopesync", ["requeue", "--spool", spool.root, "huge.tar"])
                #expect(requeue.status == 0, "\(requeue.stderr)")
                #expect(try CheckpointStore(spool: spool).beginReading(name: "huge.tar") == 0)
            }
        }
    }

    @Test("in-process (no child to read in), a bundle goes to failed/ unread once three readings were cut short")
    func cutShortReadingsWithoutAChild() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 14)])
            let name = try spool.names(.incoming)[0]
            let store = try CheckpointStore(spool: spool)
            // Three processes died reading it.
            for expected in 0..<3 { #expect(try store.beginReading(name: name) == expected) }
            try await withDevServer { server in
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .bundlesFailed && summary.failed == 1)
                let sidecar = try String(contentsOfFile: spool.path(.failed, name + ".error"), encoding: .utf8)
                #expect(sidecar.contains("reason: reader_crashed"))
                #expect(sidecar.contains("cut short 3 times"))
            }
        }
    }
}
