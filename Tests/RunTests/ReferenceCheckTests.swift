import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// docs/api.md, "Reference lists": the ids a bundle names are checked against the
/// dev server's reference lists before anything of it is sent, over real sockets.
@Suite struct ReferenceCheckTests {
    @Test(
        "unknown ammunition in the 3rd DOPE entry: failed/ with unknown_reference and its field, nothing on the server; after the id is added, requeue puts everything there once"
    )
    func unknownAmmunitionThenRequeue() async throws {
        try await withTemporarySpool { spool, directory in
            let sample = SampleSession(seed: 811).naming(ammunitionId: 9999, inDopeEntry: 2)
            let name = try pack(sample, into: spool, scratch: directory)
            try await withDevServer { server in
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .bundlesFailed && summary.failed == 1)
                #expect(try spool.names(.failed) == [name, name + ".error"])
                let sidecar = try #require(ErrorSidecar.read(from: spool.sidecarPath(forFailed: name)))
                #expect(sidecar.reason == .unknownReference)
                #expect(sidecar.field == "dope[2].ammunitionId")
                #expect(sidecar.message?.contains("ammunition 9999") == true, "\(sidecar.message ?? "")")
                #expect(sidecar.step == nil && sidecar.httpStatus == nil)
                #expect(try await server.createdCounts().values.allSatisfy { $0 == 0 })
                #expect(try await !server.requestLog().contains { $0.method == "POST" })

                // inspect says the same from the lists the run kept, without asking the server.
                let inspect = try await runBuilt(
                    "dopesync", ["inspect", spool.path(.failed, name), "--spool", spool.root])
                #expect(inspect.stdout.contains("references   1 id not in the server's lists"), "\(inspect.stdout)")
                #expect(inspect.stdout.contains("dope[2].ammunitionId  ammunition 9999"), "\(inspect.stdout)")

                try await server.postJSON("/admin/references", ["ammunition": [9999]])
                let requeue = try await runBuilt(
                    "dopesync", ["requeue", "failed/\(name)", "--spool", spool.root])
                #expect(requeue.status == 0, "\(requeue.stderr)")
                let (again, againStatus) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(againStatus == .success && again.done == 1)
                #expect(try spool.names(.done) == [name])

                let bundle = try BundleInspector().inspect(path: spool.path(.done, name))
                let plan = try UploadPlan(session: bundle.session, images: bundle.images)
                let created = try await server.requestLog().filter { $0.status == 201 }.compactMap(\.key)
                #expect(created.sorted() == plan.steps.map(\.idempotencyKey).sorted(), "each step created once")
                let tree = try await server.sessionTree(clientID: sample.sessionID)
                #expect(tree.dope.map(\.clientId) == sample.dopeEntryIDs)
            }
        }
    }

    @Test("a run of 50 bundles reads each list once; the next run revalidates each with a 304")
    func oneReadPerRun() async throws {
        try await withTemporarySpool { spool, directory in
            var shape = SampleSession.Shape()
            shape.groups = 0
            shape.readingsPerChrono = 1
            for seed in 0..<50 {
                try pack(SampleSession(seed: 900 + UInt64(seed), shape: shape), into: spool, scratch: directory)
            }
            try await withDevServer { server in
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .success && summary.done == 50)
                for list in ["rifles", "ammunition", "locations"] {
                    #expect(try await server.referenceListReads()[list] == ["200": 1, "304": 0], "\(list)")
                }
                try pack(SampleSession(seed: 999, shape: shape), into: spool, scratch: directory)
                let (next, nextStatus) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(nextStatus == .success && next.done == 1)
                for list in ["rifles", "ammunition", "locations"] {
                    #expect(try await server.referenceListReads()[list] == ["200": 1, "304": 1], "\(list)")
                }
                let ifNoneMatch = try CheckpointStore(spool: spool).referenceLists()[.ammunition]?.etag
                #expect(ifNoneMatch?.hasPrefix("\"") == true, "the ETag is kept in the checkpoint store")
            }
        }
    }

    @Test("a list changed on the server is read again in full, and the new id passes")
    func changedListIsReadAgain() async throws {
        try await withTemporarySpool { spool, directory in
            try await withDevServer { server in
                try pack(SampleSession(seed: 950), into: spool, scratch: directory)
                _ = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                try await server.postJSON("/admin/references", ["ammunition": [9999]])
                let sample = SampleSession(seed: 951).naming(ammunitionId: 9999, inDopeEntry: 2)
                try pack(sample, into: spool, scratch: directory)
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .success && summary.done == 1)
                let reads = try await server.referenceListReads()
                #expect(reads["ammunition"] == ["200": 2, "304": 0])
                #expect(reads["rifles"] == ["200": 1, "304": 1])
            }
        }
    }

    @Test(
        "an older API without the lists: each is asked once a run, and the create's 422 fails the bundle as before, with no loop"
    )
    func olderAPIWithoutLists() async throws {
        try await withTemporarySpool { spool, directory in
            let sample = SampleSession(seed: 812).naming(ammunitionId: 9999, inDopeEntry: 2)
            let name = try pack(sample, into: spool, scratch: directory)
            try pack(SampleSession(seed: 813), into: spool, scratch: directory)
            try await withDevServer(.withoutReferenceLists) { server in
                let result = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(result.status == 1, "\(result.output)")
                #expect(try spool.names(.done).count == 1)
                let sidecar = try #require(ErrorSidecar.read(from: spool.sidecarPath(forFailed: name)))
                #expect(sidecar.reason == .http(422) && sidecar.step == "dope:\(sample.dopeEntryIDs[2])")
                #expect(sidecar.field == "dope[2].ammunitionId", "the API's field, named as the bundle's record")
                let log = try await server.requestLog()
                for path in ["/api/rifles", "/api/ammunition", "/api/locations"] {
                    #expect(log.filter { $0.path == path }.map(\.status) == [404], "\(path)")
                }
                let warnings = result.output.split(separator: "\n").filter { $0.contains("no reference lists") }
                #expect(warnings.count == 1, "\(result.output)")
            }
        }
    }
}

/// The `field:` line of `failed/NAME.error` for bundles validation refuses.
@Suite struct FailureFieldTests {
    @Test("an invalid bundle's sidecar names the field at fault; a file that is no archive names none")
    func validationFailuresNameTheirField() async throws {
        try await withTemporarySpool { spool, directory in
            var sample = SampleSession(seed: 820)
            sample.json["humidity"] = 150
            // Made with GNU tar, as a client would: `pack` refuses an invalid session.
            let layout = directory.appendingPathComponent("humid")
            try sample.writeLayout(to: layout)
            let invalid = "humid.tar.gz"
            try await ArchiveProducer.gnuTarGzip.archive(
                layout, to: URL(fileURLWithPath: spool.path(.incoming, invalid)))
            let garbage = "garbage.tar.gz"
            try Data("not an archive at all".utf8).write(to: URL(fileURLWithPath: spool.path(.incoming, garbage)))
            try await withDevServer { server in
                let (summary, _) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(summary.failed == 2)
            }
            let humidity = try #require(ErrorSidecar.read(from: spool.sidecarPath(forFailed: invalid)))
            #expect(humidity.field?.hasSuffix("humidity") == true, "\(humidity.rendered())")
            let notAnArchive = try #require(ErrorSidecar.read(from: spool.sidecarPath(forFailed: garbage)))
            #expect(notAnArchive.field == nil, "\(notAnArchive.rendered())")
        }
    }

    @Test(
        "an ammunition list whose items name no lots vouches for no lot: a bundle with a lot reaches the server, an unknown lot is the create's 422"
    )
    func aListWithoutLotsChecksNoLot() async throws {
        try await withTemporarySpool { spool, directory in
            let known = SampleSession(seed: 821).naming(ammoLotId: 42)
            let unknown = SampleSession(seed: 822).naming(ammoLotId: 9999)
            let knownName = try pack(known, into: spool, scratch: directory)
            let unknownName = try pack(unknown, into: spool, scratch: directory)
            var configuration = DevServerConfiguration()
            configuration.lotsInList = false
            try await withDevServer(configuration) { server in
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .bundlesFailed && summary.done == 1 && summary.failed == 1, "\(summary)")
                #expect(try spool.names(.done) == [knownName])
                let sidecar = try #require(ErrorSidecar.read(from: spool.sidecarPath(forFailed: unknownName)))
                #expect(sidecar.reason == .http(422), "\(sidecar.reason): \(sidecar.message ?? "")")
                #expect(sidecar.step?.hasPrefix("chrono:") == true, "\(sidecar.step ?? "-")")
                let tree = try await server.sessionTree(clientID: known.sessionID)
                #expect(tree.chrono.count == 1)
            }
        }
    }
}
