import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Logging
import Synchronization
import Testing

@testable import DopeSync

/// `dopesync run` against the real dev server over real sockets, with real bundles, a real
/// SQLite checkpoint file and a real spool.
@Suite struct RunAgainstDevServerTests {
    static func run(_ spool: Spool, _ server: RunningDevServer, token: String? = nil, apiURL: String? = nil) async -> (
        RunSummary, DopeSync.ExitStatus
    ) {
        await runWorker(spool, apiURL: apiURL ?? server.baseURL, token: token ?? server.token)
    }

    /// Makes deferred bundles due now, as an operator would.
    static func makeDue(_ spool: Spool) throws {
        // What an operator's `touch` does: a file modified after its deferral is due at once.
        for name in try spool.names(.incoming) {
            try FileManager.default.setAttributes(
                [.modificationDate: Date()], ofItemAtPath: spool.path(.incoming, name))
        }
    }

    @Test("after a run each session tree on the server equals its bundle, created in the spec's order")
    func orderAndContent() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...4).map { SampleSession(seed: UInt64(100 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            try await withDevServer { server in
                let (summary, status) = await Self.run(spool, server)
                #expect(status == .success)
                #expect(summary.done == 4 && summary.failed == 0)
                #expect(try spool.names(.done).count == 4)
                #expect(try spool.names(.incoming).isEmpty && spool.names(.processing).isEmpty)
                // The run has let its share of the store go: a `migrate` may follow it at once.
                let migration = try await SpoolCalls.run { () throws(SpoolError) in
                    try StoreLock.take(.exclusive, in: spool)
                }
                #expect(migration != nil)
                await SpoolCalls.run { migration?.release() }

                let log = try await server.requestLog()
                for sample in samples {
                    let tree = try await server.sessionTree(clientID: sample.sessionID)
                    #expect(tree.dope.map(\.clientId) == sample.dopeEntryIDs)
                    #expect(tree.chrono.flatMap { $0.readings.map(\.clientId) } == sample.velocityReadingIDs)
                    #expect(tree.groups.map(\.clientId) == sample.groupIDs)
                    let images = tree.images
                    #expect(images.count == sample.images.count)
                    for (name, sha) in images { #expect(sha256Hex(sample.images[name]!) == sha) }

                    // Creation order: this session's requests arrived in the plan's order.
                    let bundle = try BundleInspector().inspect(path: spool.path(.done, "\(sample.sessionID).tar.gz"))
                    let plan = try UploadPlan(session: bundle.session, images: bundle.images).steps.map(
                        \.idempotencyKey)
                    let arrived = log.compactMap { $0.key }.filter { Set(plan).contains($0) }
                    #expect(arrived == plan)
                }
            }
        }
    }

    @Test("a bundle over 1 MiB, its images streamed from the archive, syncs with every image intact")
    func bigBundleSyncs() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(
                seed: 77, shape: SampleSession.Shape().withImages(groups: 2, perGroup: 2, bytes: 1_200_000))
            let spool = try await makeSpool(in: directory, samples: [sample])
            let name = "\(sample.sessionID).tar.gz"
            let size = try FileManager.default.attributesOfItem(atPath: spool.path(.incoming, name))[.size] as! Int64
            #expect(size >= 1 << 20, "the bundle must be over 1 MiB, its images read again from the archive when sent")
            try await withDevServer { server in
                let (summary, status) = await Self.run(spool, server)
                #expect(status == .success && summary.done == 1)
                #expect(try spool.names(.done) == [name])
                let images = try await server.sessionTree(clientID: sample.sessionID).images
                #expect(images.count == sample.images.count)
                for (file, sha) in images { #expect(sha256Hex(sample.images[file]!) == sha, "\(file)") }
            }
        }
    }

    @Test(
        "a server rejection mid-bundle fails it with the step and message; once fixed, a requeue resumes without resending"
    )
    func serverRejectionThenResume() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 200).naming(ammunitionId: 9999, inDopeEntry: 2)
            let dope = sample.dopeEntryIDs
            let spool = try await makeSpool(in: directory, samples: [sample])
            // An API without reference lists: only the create's 422 finds the id, mid-bundle.
            try await withDevServer(.withoutReferenceLists) { server in
                let (_, status) = await Self.run(spool, server)
                #expect(status == .bundlesFailed)
                let name = "\(sample.sessionID).tar.gz"
                #expect(try spool.names(.failed) == [name, name + ".error"])
                let sidecar = try String(contentsOfFile: spool.path(.failed, name + ".error"), encoding: .utf8)
                #expect(sidecar.contains("step: dope:\(dope[2])"))
                #expect(sidecar.contains("http_status: 422"))
                #expect(sidecar.contains("unknown_reference"))
                #expect(sidecar.contains("session: \(sample.sessionID)"))

                try await server.postJSON("/admin/references", ["ammunition": [9999]])
                try FileManager.default.moveItem(atPath: spool.path(.failed, name), toPath: spool.path(.incoming, name))
                let before = try await server.requestLog().count
                let (summary, again) = await Self.run(spool, server)
                #expect(again == .success)
                #expect(summary.done == 1)
                let resent = try await server.requestLog().dropFirst(before)
                #expect(!resent.contains { $0.path == "/api/sessions" })
                #expect(resent.filter { $0.path.hasSuffix("/dope") }.count == dope.count - 2)
                #expect(try await server.createdCounts()["session"] == 1)
            }
        }
    }

    @Test("a wrong token: exit 77 and every bundle back in incoming/, no attempt counted")
    func wrongToken() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(
                in: directory, samples: (1...3).map { SampleSession(seed: UInt64(300 + $0)) })
            try await withDevServer { server in
                let (_, status) = await Self.run(spool, server, token: "wrong")
                #expect(status == .permissionDenied)
                #expect(try spool.names(.incoming).count == 3)
                #expect(try spool.names(.failed).isEmpty && spool.names(.processing).isEmpty)
                let store = try CheckpointStore(spool: spool)
                for name in try spool.names(.incoming) {
                    #expect((try store.bundleState(name: name)?.attempts ?? 0) == 0)
                }
            }
        }
    }

    @Test(
        "a checkpoint database held by a stuck process when a run starts: exit 73 after the busy timeout, nothing claimed, nothing sent"
    )
    func checkpointDatabaseHeldElsewhere() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(
                in: directory, samples: (1...3).map { SampleSession(seed: UInt64(350 + $0)) })
            _ = try CheckpointStore(spool: spool)  // migrated, as after earlier runs
            // A process stopped while it holds the write lock (another open file description
            // conflicts as another process would).
            let holder = open(spool.databaseLockPath, O_RDWR | O_CLOEXEC)
            #expect(flock(holder, LOCK_EX) == 0)
            defer { close(holder) }
            try await withDevServer { server async throws in
                var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                options.minAge = .zero
                options.checkpointBusyTimeout = .milliseconds(100)
                let started = ContinuousClock.now
                let (summary, status) = await Worker(options: options, logger: quietLogger).run()
                #expect(status == .cannotCreate)
                #expect(summary.done == 0 && summary.failed == 0 && summary.requests == 0)
                let took = ContinuousClock.now - started
                #expect(
                    took >= .milliseconds(100) && took < .seconds(30),
                    "it waited out the busy timeout, then ended instead of waiting for good: \(took)")
                #expect(try spool.names(.incoming).count == 3)
                #expect(try spool.names(.processing).isEmpty && spool.names(.failed).isEmpty)
                #expect(try await server.requestLog().isEmpty)
            }
        }
    }

    @Test(
        "the checkpoint database held by a stuck process in the middle of a run: exit 73, every bundle back in incoming/, none failed or lost",
        .timeLimit(minutes: 3))
    func checkpointDatabaseHeldMidRun() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(
                in: directory, samples: (1...3).map { SampleSession(seed: UInt64(360 + $0)) })
            var configuration = DevServerConfiguration()
            configuration.faults.latencyMilliseconds = 20...20  // time to take the lock between two steps
            let (requests, arrived) = AsyncStream.makeStream(of: Void.self)
            configuration.onRequest = { _, _ in arrived.yield() }
            try await withDevServer(configuration) { server async throws in
                var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                options.minAge = .zero
                options.checkpointBusyTimeout = .milliseconds(200)
                let run = Task { await Worker(options: options, logger: quietLogger).run() }
                // Once uploads are under way, a process takes the write lock and stops (SIGSTOP).
                for await _ in requests { break }
                let holder = open(spool.databaseLockPath, O_RDWR | O_CLOEXEC)
                #expect(flock(holder, LOCK_EX) == 0)
                defer { close(holder) }
                let (summary, status) = await run.value
                #expect(status == .cannotCreate)
                #expect(summary.done == 0 && summary.failed == 0 && summary.deferred == 0)
                #expect(try spool.names(.incoming).count == 3)
                #expect(
                    try spool.names(.processing).isEmpty && spool.names(.failed).isEmpty
                        && spool.names(.done).isEmpty)
            }
        }
    }

    @Test("no server: exit 75, bundles back in incoming/ with an attempt counted, none failed")
    func noServer() async throws {
        try await withTemporaryDirectory { directory in
            // One bundle is enough: an API that does not answer at all opens the breaker.
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 401)])
            // A port nobody listens on, and no other test's server can take meanwhile.
            let (summary, status) = try await withRefusingPort { deadURL in
                var options = RunOptions(spoolRoot: spool.root, apiURL: deadURL, token: "t")
                options.minAge = .zero
                options.retry.base = .milliseconds(1)
                return await Worker(options: options, logger: quietLogger).run()
            }
            #expect(status == .temporaryFailure)
            #expect(summary.failed == 0)
            #expect(try spool.names(.incoming).count == 1)
            #expect(try spool.names(.failed).isEmpty && spool.names(.processing).isEmpty)
            let store = try CheckpointStore(spool: spool)
            let attempts = try spool.names(.incoming).map { try store.bundleState(name: $0)?.attempts ?? 0 }
            #expect(attempts.contains { $0 >= 1 })
        }
    }

    @Test(
        "with failures, rate limits and lost answers, repeated runs converge with zero duplicates",
        arguments: keysHonouredOrIgnored)
    func faultsConverge(keysHonoured: Bool) async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...6).map { SampleSession(seed: UInt64(500 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            var configuration = DevServerConfiguration()
            configuration.ignoreIdempotencyKeys = !keysHonoured
            configuration.faults.failRate = 0.1
            configuration.faults.rateLimitRate = 0.1
            configuration.faults.dropAfterCommitRate = 0.1
            configuration.faults.retryAfterSeconds = 0
            configuration.faults.seed = 42
            try await withDevServer(configuration) { server in
                var runs = 0
                while try !spool.names(.incoming).isEmpty, runs < 30 {
                    _ = await Self.run(spool, server)
                    try Self.makeDue(spool)
                    runs += 1
                }
                #expect(try spool.names(.done).count == samples.count, "after \(runs) runs")
                let created = try await server.createdCounts()
                #expect(created["session"] == samples.count)
                #expect(created["image"] == samples.reduce(0) { $0 + $1.images.count })
                let total = created.values.reduce(0, +)
                #expect(total == samples.reduce(0) { $0 + $1.expectedRequestCount })
                struct Stats: Decodable { var faults: [String: Int] }
                let faults = try await server.get("/admin/stats", as: Stats.self).faults
                #expect(faults["dropped_after_commit", default: 0] > 0, "the dangerous window was exercised")
            }
        }
    }

    @Test("a lost checkpoint database: the next runs still create nothing twice", arguments: keysHonouredOrIgnored)
    func lostCheckpointDatabase(keysHonoured: Bool) async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...4).map { SampleSession(seed: UInt64(600 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            var configuration = DevServerConfiguration()
            configuration.ignoreIdempotencyKeys = !keysHonoured
            try await withDevServer(configuration) { server in
                var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                options.minAge = .zero
                options.maxBundles = 2
                options.concurrency = 1
                _ = await Worker(options: options, logger: quietLogger).run()
                // Done bundles go back in, as if a client sent them again, and the database is gone.
                for name in try spool.names(.done) {
                    try FileManager.default.moveItem(
                        atPath: spool.path(.done, name), toPath: spool.path(.incoming, "again-" + name))
                }
                for suffix in ["", "-wal", "-shm"] {
                    try? FileManager.default.removeItem(atPath: spool.databasePath + suffix)
                }
                let (_, status) = await Self.run(spool, server)
                #expect(status == .success)
                #expect(try spool.names(.done).count == 4)
                let created = try await server.createdCounts()
                #expect(created.values.reduce(0, +) == samples.reduce(0) { $0 + $1.expectedRequestCount })
            }
        }
    }

    @Test(
        "three runs started at once on one spool: each bundle claimed once, zero duplicates",
        arguments: keysHonouredOrIgnored)
    func threeConcurrentRuns(keysHonoured: Bool) async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...12).map { SampleSession(seed: UInt64(700 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            var configuration = DevServerConfiguration()
            configuration.ignoreIdempotencyKeys = !keysHonoured
            try await withDevServer(configuration) { server in
                let results = await withTaskGroup(of: RunSummary.self) { group in
                    for _ in 0..<3 { group.addTask { await Self.run(spool, server).0 } }
                    return await group.reduce(into: [RunSummary]()) { $0.append($1) }
                }
                #expect(results.reduce(0) { $0 + $1.claimed } == samples.count)
                #expect(try spool.names(.done).count == samples.count)
                let created = try await server.createdCounts()
                #expect(created.values.reduce(0, +) == samples.reduce(0) { $0 + $1.expectedRequestCount })
            }
        }
    }

    @Test(
        "three dopesync processes started at once on one spool: each bundle claimed by one, zero duplicates",
        arguments: keysHonouredOrIgnored)
    func threeConcurrentProcesses(keysHonoured: Bool) async throws {
        try await withTemporaryDirectory { directory in
            // About 50 requests a bundle at a few milliseconds each: the batch lasts about a second,
            // far longer than starting a process, so the three runs overlap.
            let samples = (1...12).map { SampleSession(seed: UInt64(750 + $0), shape: .realistic) }
            let spool = try await makeSpool(in: directory, samples: samples)
            var configuration = DevServerConfiguration()
            configuration.faults.latencyMilliseconds = 2...5
            configuration.ignoreIdempotencyKeys = !keysHonoured
            try await withDevServer(configuration) { server in
                var children: [Spawned] = []
                for index in 0..<3 {
                    // Each run's log kept, for a failure to show why that run ended as it did.
                    let log = directory.appendingPathComponent("run-\(index).stderr").path
                    children.append(
                        try await spawnRun(spool, against: server, ["--concurrency", "2"], errors: .file(log)))
                }
                var claimed: [Int] = []
                for child in children {
                    let summary = await onOwnThread { child.output.readLine() ?? "" }
                    #expect(await child.finished() == 0, "\(summary)\n\(child.errorText)")
                    let count = summary.split(separator: " ").dropFirst(2).first.flatMap { Int($0) }
                    claimed.append(try #require(count, "no summary line: \(summary)"))
                }
                #expect(claimed.reduce(0, +) == samples.count, "claims per run: \(claimed)")
                #expect(try spool.names(.done).count == samples.count)
                let created = try await server.createdCounts()
                #expect(created["session"] == samples.count)
                #expect(created.values.reduce(0, +) == samples.reduce(0) { $0 + $1.expectedRequestCount })
            }
        }
    }

    @Test("--max-time: the run stops claiming at the deadline, finishes what it claimed, leaves the rest untouched")
    func maxTimeStopsClaiming() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...10).map { SampleSession(seed: UInt64(800 + $0), shape: .realistic) }
            let spool = try await makeSpool(in: directory, samples: samples)
            // The run's clock jumps past the deadline as the server takes the first bundle's
            // first create: no claim can come after it, and none was late because the machine was.
            let jumped = Atomic(false)
            var configuration = DevServerConfiguration()
            configuration.onRequest = { method, _ in
                if method == "POST" { jumped.store(true, ordering: .relaxed) }
            }
            try await withDevServer(configuration) { server in
                var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                options.minAge = .zero
                options.concurrency = 1
                options.maxTime = .seconds(3600)
                options.clock = { ContinuousClock.now + (jumped.load(ordering: .relaxed) ? .seconds(7200) : .zero) }
                let (summary, status) = await Worker(options: options, logger: quietLogger).run()
                #expect(status == .success)
                #expect(summary.claimed == 1, "\(summary.line)")
                #expect(summary.done == 1, "the bundle claimed before the deadline is finished, not cut off")
                #expect(try spool.names(.done).count == 1)
                let left = try spool.names(.incoming)
                #expect(left.count == samples.count - 1)
                let store = try CheckpointStore(spool: spool)
                for name in left {
                    #expect(try store.bundleState(name: name)?.attempts ?? 0 == 0, "not an attempt: \(name)")
                    let modified =
                        try FileManager.default.attributesOfItem(atPath: spool.path(.incoming, name))[.modificationDate]
                        as! Date
                    #expect(modified <= Date(), "due at once for the next run, not deferred: \(name)")
                }
            }
        }
    }

    @Test("a server failing every request (503) opens the breaker: exit 75 after a few steps, none failed")
    func failingStepsOpenTheBreaker() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...8).map { SampleSession(seed: UInt64(850 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            var configuration = DevServerConfiguration()
            configuration.faults.failRate = 1  // the server answers, but only with errors
            configuration.faults.retryAfterSeconds = 0
            try await withDevServer(configuration) { server in
                var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                options.minAge = .zero
                options.concurrency = 2
                options.retry.base = .milliseconds(1)
                let (summary, status) = await Worker(options: options, logger: quietLogger).run()
                #expect(status == .temporaryFailure)
                #expect(summary.failed == 0)
                // Without the breaker every bundle would be claimed and tried.
                #expect(summary.claimed < samples.count, "\(summary.line)")
                let (incoming, processing, done, failed) = try (
                    spool.names(.incoming), spool.names(.processing), spool.names(.done),
                    spool.names(.failed)
                )
                #expect(processing.isEmpty && failed.isEmpty)
                #expect(incoming.count + done.count == samples.count)
            }
        }
    }

    @Test("with --log-format json a metadata key named like a field never replaces it: the event text stays in message")
    func jsonLogsKeepTheirMessage() async throws {
        try await withTemporaryDirectory { directory in
            let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 3950)])
            var configuration = DevServerConfiguration()
            configuration.faults.failRate = 0.3
            configuration.faults.seed = 7
            try await withDevServer(configuration) { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, ["--log-format", "json"])
                #expect(status == 0, "\(output)")
                let lines = output.split(separator: "\n").compactMap {
                    (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: String]
                }
                let retries = lines.filter { $0["message"] == "retrying a step" }
                #expect(!retries.isEmpty, "\(output)")
                #expect(retries.allSatisfy { $0["metadata.message"] != nil }, "\(retries)")
            }
        }
    }
}
