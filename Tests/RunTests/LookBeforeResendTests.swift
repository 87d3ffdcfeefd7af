import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// Look before resending, against the real dev server: what it costs on the clean path, what it
/// refuses (a record on the server with other content), and how a run goes against a server
/// without lookups.
@Suite struct LookBeforeResendTests {
    /// The API requests of the server's log but the reads of the reference lists: (method, path),
    /// in arrival order.
    static func apiRequests(_ server: RunningDevServer) async throws -> [(method: String, path: String)] {
        let lists = Set(ReferenceList.allCases.map(\.path))
        return try await server.requestLog().filter { $0.path.hasPrefix("/api/") && !lists.contains($0.path) }
            .map { ($0.method, $0.path) }
    }

    @Test(
        "the clean path costs one lookup per bundle (GET /api/sessions?clientId=) and the three reference lists once a run, nothing else extra"
    )
    func cleanPathBudget() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...5).map { SampleSession(seed: UInt64(1100 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            try await withDevServer { server in
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .success && summary.done == samples.count)
                let requests = try await Self.apiRequests(server)
                let gets = requests.filter { $0.method == "GET" }
                let posts = requests.filter { $0.method == "POST" }
                #expect(gets.count == samples.count, "\(gets)")
                #expect(gets.allSatisfy { $0.path == "/api/sessions" })
                #expect(posts.count == samples.reduce(0) { $0 + $1.expectedRequestCount })
                let listReads =
                    try await server.requestLog().filter { $0.path.hasPrefix("/api/") }.count - requests.count
                #expect(listReads == ReferenceList.allCases.count)
                #expect(summary.requests == gets.count + posts.count + listReads)
                let report = try await runBuilt("dopesync", ["status", "--spool", spool.root])
                #expect(
                    report.stdout.contains(
                        "the API answers lookups: nothing is sent twice, even if it ignores Idempotency-Key"),
                    "\(report.stdout)")
            }
        }
    }

    @Test(
        "a record on the server with other content fails the bundle as changed_after_upload, naming record and field; nothing is sent"
    )
    func conflictingRecordFails() async throws {
        try await withTemporaryDirectory { directory in
            let original = SampleSession(seed: 1200)
            let spool = try await makeSpool(in: directory, samples: [original])
            var configuration = DevServerConfiguration()
            configuration.ignoreIdempotencyKeys = true
            try await withDevServer(configuration) { server in
                #expect(await runWorker(spool, apiURL: server.baseURL, token: server.token).1 == .success)
                let before = try await server.createdCounts()

                // The same session again, one DOPE entry edited on the phone, and no checkpoint of
                // the first upload (another host sent it, or the database was lost).
                for suffix in ["", "-wal", "-shm"] {
                    try? FileManager.default.removeItem(atPath: spool.databasePath + suffix)
                }
                var edited = original
                var dope = edited.json["dopeEntries"] as! [[String: any Sendable]]  // the sample's own document
                dope[1]["distance"] = 175
                edited.json["dopeEntries"] = dope
                let name = try pack(edited, into: spool, scratch: directory.appendingPathComponent("edited"))
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .bundlesFailed && summary.failed == 1)
                let sidecar = try String(contentsOfFile: spool.path(.failed, name + ".error"), encoding: .utf8)
                #expect(sidecar.contains("reason: changed_after_upload"), "\(sidecar)")
                #expect(sidecar.contains("step: dope:\(dope[1]["id"] as! String)"))
                #expect(sidecar.contains("field: dope[1].distance"), "\(sidecar)")
                #expect(sidecar.contains("dope[1] is already on the server as record"), "\(sidecar)")
                #expect(sidecar.contains("distance = 150, but the bundle has 175"))
                #expect(try await server.createdCounts() == before, "nothing was created or overwritten")
            }
        }
    }

    @Test(
        "a bundle of a session partly synced from elsewhere (no checkpoints here) sends only what the server lacks, though it ignores keys"
    )
    func progressMadeElsewhere() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 1300)
            // Another host synced the session and its DOPE entries, nothing else yet.
            var early = sample
            early.json["chronoSessions"] = [[String: any Sendable]]()
            early.json["groupEntries"] = [[String: any Sendable]]()
            early.images = [:]
            let spool = try await makeSpool(in: directory, samples: [early])
            var configuration = DevServerConfiguration()
            configuration.ignoreIdempotencyKeys = true
            try await withDevServer(configuration) { server in
                #expect(await runWorker(spool, apiURL: server.baseURL, token: server.token).1 == .success)
                // Here, no checkpoint of that: the whole session arrives in a new bundle.
                for suffix in ["", "-wal", "-shm"] {
                    try? FileManager.default.removeItem(atPath: spool.databasePath + suffix)
                }
                try FileManager.default.moveItem(
                    atPath: spool.path(.done), toPath: directory.appendingPathComponent("elsewhere").path)
                try FileManager.default.createDirectory(atPath: spool.path(.done), withIntermediateDirectories: false)
                try pack(sample, into: spool, scratch: directory.appendingPathComponent("whole"))
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .success && summary.done == 1)
                let created = try await server.createdCounts()
                #expect(created.values.reduce(0, +) == sample.expectedRequestCount, "every record once: \(created)")
                let posts = try await Self.apiRequests(server).filter { $0.method == "POST" }
                #expect(posts.count == sample.expectedRequestCount, "what the server had was not sent again")
            }
        }
    }

    @Test(
        "against a server without lookups (404 or 405) a run works, warning once that keys alone must do",
        arguments: [MissingLookupsStatus.notFound, .methodNotAllowed])
    func noLookups(answer: MissingLookupsStatus) async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...3).map { SampleSession(seed: UInt64(1400 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            var configuration = DevServerConfiguration()
            configuration.lookups = false
            configuration.lookupsStatus = answer
            try await withDevServer(configuration) { server in
                let result = try await runBuilt(
                    "dopesync",
                    [
                        "run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0", "--progress", "never",
                    ], environment: ["DOPESYNC_API_TOKEN": server.token])
                #expect(result.status == 0, "\(result.stderr)")
                #expect(try spool.names(.done).count == samples.count)
                let warnings = result.stderr.split(separator: "\n").filter {
                    $0.contains("the API has no session lookups")
                }
                #expect(warnings.count == 1, "\(result.stderr)")
                #expect(warnings.first?.contains("Idempotency-Key alone") == true)
                let created = try await server.createdCounts()
                #expect(created.values.reduce(0, +) == samples.reduce(0) { $0 + $1.expectedRequestCount })
                let status = try await runBuilt("dopesync", ["status", "--spool", spool.root])
                #expect(
                    status.stdout.contains(
                        "the API has no lookups: nothing is sent twice only if it honours Idempotency-Key"),
                    "\(status.stdout)")
            }
        }
    }

    @Test(
        "after a 429 (not processed, for sure) a step is sent again without a look; after a 500 it is looked for first")
    func noLookAfterA429() async throws {
        for (status, rateLimited) in [(429, true), (500, false)] {
            try await withTemporaryDirectory { directory in
                let spool = try await makeSpool(in: directory, samples: [SampleSession(seed: 1300)])
                var configuration = DevServerConfiguration()
                if rateLimited { configuration.faults.rateLimitRate = 1 } else { configuration.faults.failRate = 1 }
                configuration.faults.retryAfterSeconds = 0
                try await withDevServer(configuration) { server in
                    _ = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                    let requests = try await Self.apiRequests(server)
                    let posts = requests.filter { $0.method == "POST" }.count
                    let gets = requests.filter { $0.method == "GET" }.count
                    #expect(posts == RetryPolicy().attempts, "\(status): \(requests)")
                    // The session is looked for once before its first send; then after each
                    // unknown outcome only.
                    #expect(gets == (rateLimited ? 1 : posts), "\(status): \(requests)")
                }
            }
        }
    }
}
