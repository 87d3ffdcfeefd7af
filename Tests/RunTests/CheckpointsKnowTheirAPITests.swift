import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A spool tried against one API (staging), then pointed at another (production): a step
/// recorded against the first is no fact on the second, and no server id of the first is ever
/// sent to the second.
@Suite struct CheckpointsKnowTheirAPITests {
    /// Four bundles on staging: three synced, one failed by a 422 at its third DOPE entry (its
    /// session and first two entries are on staging). Returns the samples and the failed one's name.
    static func stagedSpool(in directory: URL) async throws -> (Spool, [SampleSession], partial: String) {
        let good = (1...3).map { SampleSession(seed: UInt64(3500 + $0)) }
        let partial = SampleSession(seed: 3504).naming(ammunitionId: 9999, inDopeEntry: 2)
        let spool = try await makeSpool(in: directory, samples: good + [partial])
        try await withDevServer(.withoutReferenceLists) { staging in
            let (summary, status) = await runWorker(spool, apiURL: staging.baseURL, token: staging.token)
            #expect(status == .bundlesFailed && summary.done == 3 && summary.failed == 1, "\(summary)")
            let created = try await staging.createdCounts()
            #expect(created["dope"] == 9 + 2, "\(created)")
        }
        return (spool, good + [partial], "\(partial.sessionID).tar.gz")
    }

    /// What the operator does after pointing the spool at production: the staged bundles dropped
    /// into `incoming/` again, the one that failed partway requeued.
    static func dropAgainAndRequeue(_ spool: Spool, partial: String) async throws {
        for name in try spool.names(.done) {
            #expect(rename(spool.path(.done, name), spool.path(.incoming, name)) == 0)
        }
        let requeued = await RequeueCommand.run(spoolRoot: spool.root, selection: .names([partial]))
        #expect(requeued.status == .success, "\(requeued.diagnostics ?? "")")
    }

    /// Production, which knows ammunition 9999 and ignores keys: only looking keeps it exact.
    static func production(lookups: Bool) -> DevServerConfiguration {
        var configuration = DevServerConfiguration()
        configuration.references.ammunition = IDSet(1...500, 9999...9999)
        configuration.ignoreIdempotencyKeys = true
        configuration.lookups = lookups
        return configuration
    }

    /// Every sample's records on `server` exactly once, each under its own session there.
    static func expectEachRecordOnce(_ samples: [SampleSession], on server: RunningDevServer) async throws {
        let created = try await server.createdCounts()
        #expect(created["session"] == samples.count, "\(created)")
        #expect(created.values.reduce(0, +) == samples.reduce(0) { $0 + $1.expectedRequestCount }, "\(created)")
        struct Page: Decodable { var items: [SessionTreeSnapshot.Record] }
        for sample in samples {
            // The admin lookups answer where the API's own are switched off.
            let items = try await server.get("/admin/sessions?clientId=\(sample.sessionID)", as: Page.self).items
            try #require(items.count == 1, "\(items.count) sessions \(sample.sessionID)")
            let tree = try await server.get("/admin/sessions/\(items[0].id)", as: SessionTreeSnapshot.self)
            #expect(tree.dope.map(\.clientId).sorted() == sample.dopeEntryIDs.sorted())
            #expect(tree.groups.map(\.clientId).sorted() == sample.groupIDs.sorted())
        }
    }

    @Test(
        "pointed at an API with lookups: staged bundles dropped again and the partial one requeued, each record once there"
    )
    func anotherAPIWithLookupsGetsEveryRecordOnce() async throws {
        try await withTemporaryDirectory { directory in
            let (spool, samples, partial) = try await Self.stagedSpool(in: directory)
            try await Self.dropAgainAndRequeue(spool, partial: partial)
            try await withDevServer(Self.production(lookups: true)) { production in
                let (status, output) = try await runToEnd(spool, apiURL: production.baseURL, token: production.token)
                #expect(status == 0, "\(output)")
                #expect(output.contains("checkpoints recorded against another API"), "\(output)")
                #expect(try spool.names(.done).count == samples.count)
                try await Self.expectEachRecordOnce(samples, on: production)
                // No staging id reached production: no request named a session production lacks.
                let log = try await production.requestLog()
                #expect(!log.contains { $0.status == 404 }, "\(log.filter { $0.status == 404 })")
            }
        }
    }

    @Test(
        "pointed at an API without lookups: exit 78 naming both URLs and nothing sent; told it is another server, each record once"
    )
    func anotherAPIWithoutLookupsWaitsForTheOperator() async throws {
        try await withTemporaryDirectory { directory in
            let (spool, samples, partial) = try await Self.stagedSpool(in: directory)
            let stagingAPI = try CheckpointStore(spool: spool).apiBook().addresses.values.first
            try await withDevServer(Self.production(lookups: false)) { production in
                // status, told the API runs now use, names the failed bundle's other API.
                let shown = await StatusCommand.run(spoolRoot: spool.root, json: false, apiURL: production.baseURL)
                #expect(
                    shown.output.contains("\(partial)  http_422")
                        && shown.output.contains(
                            "its checkpoints are \(stagingAPI ?? "?")'s, not the configured API's"),
                    "\(shown.output)")
                try await Self.dropAgainAndRequeue(spool, partial: partial)
                let (refused, output) = try await runToEnd(
                    spool, apiURL: production.baseURL, token: production.token)
                #expect(refused == 78, "\(output)")
                let productionAPI = APIAddress.normalized(production.baseURL)
                let staging = try #require(stagingAPI)
                #expect(output.contains(productionAPI) && output.contains(staging), "\(output)")
                #expect(output.contains("--another-server") && output.contains("--same-as"), "\(output)")
                #expect(try await production.requestLog().allSatisfy { $0.method == "GET" })
                #expect(try spool.names(.incoming).count == samples.count)

                // A URL that is no http(s) one is named as such, not taken for a missing --api.
                let mistyped = try await runBuilt(
                    "dopesync", ["api", "--spool", spool.root, "--api", "ftp://api.example", "--another-server"])
                #expect(mistyped.status == 64, "\(mistyped.stderr)")
                #expect(mistyped.stderr.contains("ftp://api.example") && mistyped.stderr.contains("is not an http"))
                let answer = try await runBuilt(
                    "dopesync", ["api", "--spool", spool.root, "--api", production.baseURL, "--another-server"])
                #expect(answer.status == 0, "\(answer.stderr)")
                let (status, again) = try await runToEnd(spool, apiURL: production.baseURL, token: production.token)
                #expect(status == 0, "\(again)")
                try await Self.expectEachRecordOnce(samples, on: production)
            }
        }
    }

    @Test("the same API at a new address, as the operator says: nothing of what it holds is sent again")
    func theSameAPIAtANewAddressResendsNothing() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...2).map { SampleSession(seed: UInt64(3520 + $0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            let database = directory.appendingPathComponent("api.sqlite").path
            var configuration = DevServerConfiguration()
            configuration.databasePath = database
            configuration.lookups = false
            let oldURL = try await withDevServer(configuration) { server in
                #expect(await runWorker(spool, apiURL: server.baseURL, token: server.token).1 == .success)
                return server.baseURL
            }
            for name in try spool.names(.done) {
                #expect(rename(spool.path(.done, name), spool.path(.incoming, name)) == 0)
            }
            // The same server (its database) on another port.
            try await withDevServer(configuration) { server in
                let refused = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(refused.1 == .configuration)
                let answer = await APICommand.run(
                    spoolRoot: spool.root, database: nil, apiURL: server.baseURL, answer: .sameAs(oldURL))
                #expect(answer.status == .success, "\(answer.diagnostics ?? "")")
                #expect(answer.output.contains("new address"), "\(answer.output)")
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .success && summary.done == samples.count && summary.requests == 0, "\(summary)")
                let created = try await server.createdCounts()
                #expect(created.values.reduce(0, +) == 0, "\(created)")
            }
        }
    }
}
