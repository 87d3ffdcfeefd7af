import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync
@testable import DopeSyncStore

/// `dopesync status`, `requeue`, `prune` and `inspect`'s checkpoint progress, as an operator meets them:
/// the built binary on a real spool filled by real runs against the in-process dev server.
@Suite struct OperatorCommandsTests {
    static func jsonObject(_ text: String) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(text.utf8)) as! [String: Any]
    }

    @Test(
        "status --json after runs with one bundle done, one failed, one deferred; inspect shows the done one's checkpoints"
    )
    func statusAfterRuns() async throws {
        try await withTemporarySpool { spool, directory in
            let good = SampleSession(seed: 601)
            let bad = SampleSession(seed: 602).naming(ammunitionId: 9999, inDopeEntry: 2)
            try pack(good, into: spool, scratch: directory)
            let badName = try pack(bad, into: spool, scratch: directory)
            nonisolated(unsafe) var firstURL = ""
            try await withDevServer(.withoutReferenceLists) { server in
                firstURL = server.baseURL
                let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .bundlesFailed)
                #expect(summary.done == 1 && summary.failed == 1)
            }
            // A third bundle, then a run against a port whose server is gone: deferred, waiting for retry.
            let later = SampleSession(seed: 603)
            let laterName = try pack(later, into: spool, scratch: directory)
            let (deadSummary, deadStatus) = try await withRefusingPort { deadURL in
                // The same API at an address where it is down now (as `dopesync api --same-as` records).
                try CheckpointStore(spool: spool).recordAPIAddress(
                    APIAddress.normalized(deadURL), api: APIAddress.normalized(firstURL), adoptUnbound: false)
                return await runWorker(spool, apiURL: deadURL, token: "t")
            }
            #expect(deadSummary.deferred == 1)

            let result = try await runBuilt("dopesync", ["status", "--json", "--spool", spool.root])
            #expect(result.status == 0, "\(result.stderr)")
            let document = try Self.jsonObject(result.stdout)
            #expect(document["spool"] as? String == spool.root)
            #expect(document["database"] as? String == spool.databasePath)
            #expect(document["databaseExists"] as? Bool == true)
            #expect(document["generatedAt"] is String)
            let folders = document["folders"] as! [String: [String: Any]]
            #expect(folders["done"]?["count"] as? Int == 1)
            #expect(folders["failed"]?["count"] as? Int == 1)
            #expect(folders["incoming"]?["count"] as? Int == 1)
            #expect(folders["processing"]?["count"] as? Int == 0)
            #expect((folders["done"]?["bytes"] as? Int ?? 0) > 0)
            #expect(folders["done"]?["oldestAgeSeconds"] is Double || folders["done"]?["oldestAgeSeconds"] is Int)
            #expect(folders["processing"]?["oldestAgeSeconds"] == nil)
            let incoming = document["incoming"] as! [String: Any]
            #expect(incoming["dueNow"] as? Int == 0)
            #expect(incoming["waitingForRetry"] as? Int == 1)

            let waiting = document["waiting"] as! [[String: Any]]
            #expect(waiting.count == 1)
            #expect(waiting.first?["name"] as? String == laterName)
            #expect((waiting.first?["attempts"] as? Int ?? 0) >= 1)
            #expect(waiting.first?["nextAttemptAt"] is String)
            #expect((waiting.first?["lastError"] as? [String: Any])?["reason"] is String)

            let failed = document["failed"] as! [[String: Any]]
            #expect(failed.count == 1)
            #expect(failed.first?["name"] as? String == badName)
            #expect(failed.first?["reason"] as? String == "http_422")
            #expect(failed.first?["httpStatus"] as? Int == 422)
            let message = failed.first?["message"] as? String ?? ""
            #expect(message.contains("unknown_reference"), "\(message)")
            #expect(failed.first?["session"] as? String == bad.sessionID)
            #expect(failed.first?["hasSidecar"] as? Bool == true)

            #expect((document["claims"] as! [Any]).isEmpty)
            let lastRun = document["lastRun"] as! [String: Any]
            #expect(lastRun["deferred"] as? Int == 1)
            #expect(lastRun["exitCode"] as? Int == Int(deadStatus.rawValue))
            for key in [
                "runID", "host", "pid", "startedAt", "finishedAt", "claimed", "done", "failed", "requests", "bytes",
                "seconds",
            ] {
                #expect(lastRun[key] != nil, "lastRun.\(key)")
            }

            let text = try await runBuilt("dopesync", ["status", "--spool", spool.root])
            #expect(text.status == 0)
            #expect(text.stdout.contains(spool.databasePath))
            #expect(text.stdout.contains("0 due now, 1 waiting for retry"))
            #expect(text.stdout.contains("\(badName)  http_422 at dope:"))
            #expect(text.stdout.contains("deferred 1"))

            // inspect: the done bundle's steps, all checkpointed, with server ids.
            let inspect = try await runBuilt(
                "dopesync", ["inspect", spool.path(.done, "\(good.sessionID).tar.gz"), "--spool", spool.root])
            #expect(inspect.status == 0, "\(inspect.stderr)")
            #expect(
                inspect.stdout.contains(
                    "checkpoints  \(good.expectedRequestCount) of \(good.expectedRequestCount) steps done"),
                "\(inspect.stdout)")
            #expect(inspect.stdout.contains("    session → server id"))
            let inspectJSON = try Self.jsonObject(
                try await runBuilt(
                    "dopesync",
                    ["inspect", "--json", spool.path(.done, "\(good.sessionID).tar.gz"), "--spool", spool.root]
                ).stdout)
            #expect((inspectJSON["completedSteps"] as? [Any])?.count == good.expectedRequestCount)
        }
    }

    @Test("status names the field a failed bundle's sidecar gives when the API's message does not")
    func statusNamesTheField() async throws {
        try await withTemporarySpool { spool, _ in
            try Data("x".utf8).write(to: URL(fileURLWithPath: spool.path(.failed, "b.tgz")))
            let sidecar = ErrorSidecar(
                bundle: "b.tgz", failedAt: Date(), reason: .http(422), step: "dope:2", httpStatus: 422,
                field: "dope[2].ammunitionId", message: "validation failed")
            try sidecar.rendered().write(
                toFile: spool.sidecarPath(forFailed: "b.tgz"), atomically: true, encoding: .utf8)
            let result = try await runBuilt("dopesync", ["status", "--spool", spool.root])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stdout.contains("validation failed (field dope[2].ammunitionId)"), "\(result.stdout)")
        }
    }

    @Test(
        "status counts a bundle not seen yet in incoming/ from its arrival, not from its producer's mtime of days ago")
    func incomingAgeIsFromArrival() async throws {
        try await withTemporarySpool { spool, directory in
            let name = try pack(SampleSession(seed: 604), into: spool, scratch: directory)
            // Copied with its times kept (rsync -a): written three days ago, here a moment ago.
            let threeDaysAgo = Date().addingTimeInterval(-3 * 86_400).timeIntervalSince1970
            var times = [
                timespec(tv_sec: Int(threeDaysAgo), tv_nsec: 0), timespec(tv_sec: Int(threeDaysAgo), tv_nsec: 0),
            ]
            #expect(utimensat(AT_FDCWD, spool.path(.incoming, name), &times, 0) == 0)
            let result = try await runBuilt("dopesync", ["status", "--json", "--spool", spool.root])
            #expect(result.status == 0, "\(result.stderr)")
            let folders = try #require(Self.jsonObject(result.stdout)["folders"] as? [String: [String: Any]])
            let age = try #require((folders["incoming"]?["oldestAgeSeconds"] as? NSNumber)?.doubleValue)
            #expect(age < 600, "\(age) s: the producer's mtime, not the arrival")
        }
    }

    @Test("status: a claim whose owner is alive, and one whose owner died, told apart without taking either")
    func statusClaims() async throws {
        try await withTemporarySpool { spool, _ in
            for name in ["held.tar.gz", "orphan.tar.gz"] {
                _ = FileManager.default.createFile(atPath: spool.path(.incoming, name), contents: Data("x".utf8))
            }
            let entries = try await spool.scan(minAge: .zero)
            let held = try #require(try await spool.claim(entries.first { $0.name == "held.tar.gz" }!))
            try await #require(try await spool.claim(entries.first { $0.name == "orphan.tar.gz" }!)).release()
            let store = try CheckpointStore(spool: spool)
            try store.recordClaim(name: "held.tar.gz", owner: ClaimOwner(host: "h", pid: 42, runID: "r1"))

            let status = try await SpoolStatus.gather(spool: spool)
            let claims = Dictionary(uniqueKeysWithValues: status.claims.map { ($0.name, $0) })
            #expect(claims["held.tar.gz"]?.ownerAlive == true)
            #expect(claims["held.tar.gz"]?.runID == "r1" && claims["held.tar.gz"]?.pid == 42)
            #expect(claims["orphan.tar.gz"]?.ownerAlive == false)
            #expect(held.isHeld)
            // status took nothing: the orphan can still be taken back, the held one cannot.
            let processing = try await spool.processingEntries()
            #expect(try await spool.claimOrphan(processing.first { $0.name == "held.tar.gz" }!) == nil)
            #expect(try await spool.claimOrphan(processing.first { $0.name == "orphan.tar.gz" }!) != nil)
            await held.release()
        }
    }

    @Test("status of a spool that does not exist: exit 73")
    func statusUnreadable() async throws {
        let result = try await runBuilt("dopesync", ["status", "--spool", "/nonexistent/spool"])
        #expect(result.status == 73)
        #expect(result.stderr.contains("/nonexistent/spool"))
    }

    @Test("requeue after the cause is fixed: the bundle resumes, and the session is not sent again")
    func requeueResumes() async throws {
        try await withTemporarySpool { spool, directory in
            let bad = SampleSession(seed: 610).naming(ammunitionId: 9999, inDopeEntry: 2)
            let name = try pack(bad, into: spool, scratch: directory)
            try await withDevServer(.withoutReferenceLists) { server in
                let (_, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == .bundlesFailed)
                #expect(try spool.names(.failed) == [name, name + ".error"])

                try await server.postJSON("/admin/references", ["ammunition": [9999]])
                let requeue = try await runBuilt("dopesync", ["requeue", "failed/\(name)", "--spool", spool.root])
                #expect(requeue.status == 0, "\(requeue.stderr)")
                #expect(requeue.stdout.contains("requeued failed/\(name) -> incoming/\(name)"), "\(requeue.stdout)")
                #expect(requeue.stdout.contains("3 steps already done"), "\(requeue.stdout)")
                #expect(try spool.names(.failed).isEmpty)  // the sidecar went with it
                #expect(try spool.names(.incoming) == [name])
                let modified =
                    try FileManager.default.attributesOfItem(atPath: spool.path(.incoming, name))[.modificationDate]
                    as! Date
                #expect(abs(modified.timeIntervalSinceNow) < 60)
                let state = try CheckpointStore(spool: spool).bundleState(name: name)
                #expect(state?.attempts == 0 && state?.lastOutcome == .requeued)

                let before = try await server.requestLog().count
                let (summary, again) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                #expect(again == .success)
                #expect(summary.done == 1)
                let resent = try await server.requestLog().dropFirst(before)
                #expect(!resent.contains { $0.path == "/api/sessions" })
                #expect(!resent.isEmpty)
                #expect(try await server.createdCounts()["session"] == 1)
                #expect(try spool.names(.done) == [name])
            }
        }
    }

    @Test("requeue of an unknown name: exit 1 naming it; known names are still requeued, under a suffix if taken")
    func requeueUnknownName() async throws {
        try await withTemporarySpool { spool, _ in
            _ = FileManager.default.createFile(
                atPath: spool.path(.failed, "a.tar.gz"), contents: Data("failed one".utf8))
            _ = FileManager.default.createFile(
                atPath: spool.path(.failed, "a.tar.gz.error"), contents: Data("bundle: a.tar.gz\n".utf8))
            _ = FileManager.default.createFile(
                atPath: spool.path(.incoming, "a.tar.gz"), contents: Data("newer one".utf8))

            let result = try await runBuilt("dopesync", ["requeue", "a.tar.gz", "nope.tar.gz", "--spool", spool.root])
            #expect(result.status == 1)
            #expect(result.stderr.contains("nope.tar.gz"), "\(result.stderr)")
            #expect(result.stdout.contains("requeued failed/a.tar.gz -> incoming/a.1.tar.gz"), "\(result.stdout)")
            #expect(try spool.names(.incoming) == ["a.1.tar.gz", "a.tar.gz"])
            #expect(try String(contentsOfFile: spool.path(.incoming, "a.tar.gz"), encoding: .utf8) == "newer one")
            #expect(try String(contentsOfFile: spool.path(.incoming, "a.1.tar.gz"), encoding: .utf8) == "failed one")
            #expect(try spool.names(.failed).isEmpty)

            #expect(try await runBuilt("dopesync", ["requeue", "--spool", spool.root]).status == 64)
            #expect(try await runBuilt("dopesync", ["requeue", "x", "--all", "--spool", spool.root]).status == 64)
            let empty = try await runBuilt("dopesync", ["requeue", "--all", "--spool", spool.root])
            #expect(empty.status == 0)
            #expect(empty.stdout.contains("nothing to requeue"))
        }
    }

    @Test(
        "requeue takes a bundle's path, or its sidecar's, as ls and grep -rH print them; a path outside the spool is named with what to give"
    )
    func requeueTakesPaths() async throws {
        try await withTemporarySpool { spool, _ in
            for name in ["a.tar.gz", "b.tar.gz"] {
                _ = FileManager.default.createFile(atPath: spool.path(.failed, name), contents: Data(name.utf8))
                _ = FileManager.default.createFile(
                    atPath: spool.path(.failed, name + ".error"), contents: Data("bundle: \(name)\n".utf8))
            }
            let result = try await runBuilt(
                "dopesync",
                [
                    "requeue", spool.path(.failed, "a.tar.gz"), spool.path(.failed, "b.tar.gz.error"), "/tmp/c.tar.gz",
                    "--spool", spool.root,
                ])
            #expect(result.status == 1, "only /tmp/c.tar.gz is unknown: \(result.stderr)")
            #expect(result.stdout.contains("requeued failed/a.tar.gz -> incoming/a.tar.gz"), "\(result.stdout)")
            #expect(result.stdout.contains("requeued failed/b.tar.gz -> incoming/b.tar.gz"), "\(result.stdout)")
            #expect(result.stderr.contains("/tmp/c.tar.gz") && result.stderr.contains("its path in failed/"))
            #expect(try spool.names(.incoming) == ["a.tar.gz", "b.tar.gz"] && spool.names(.failed).isEmpty)
        }
    }

    @Test(
        "prune removes the session locks no bundle holds and none took within the age; a held one stays, and a hold after it works"
    )
    func pruneRemovesUnheldSessionLocks() async throws {
        try await withTemporarySpool { spool, _ in
            let (oldID, heldID, newID) = (
                "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222",
                "33333333-3333-4333-8333-333333333333"
            )
            let old = Date(timeIntervalSinceNow: -40 * 86_400)
            // As versions before `.dopesync.sessions.lock` left them, or runs beside one.
            for id in [oldID, heldID, newID] {
                let hold = try await SpoolCalls.run { () throws(SpoolError) in
                    try spool.holdSession(id, besideOlderVersions: true)
                }
                await SpoolCalls.run { hold?.release() }
            }
            let locks = spool.root + "/" + SessionHold.legacyFolder
            for id in [oldID, heldID] {
                try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: locks + "/" + id)
            }
            // A bundle of the second session uploads now, in another process.
            let holder = try await Spawned.holdingLock(on: locks + "/" + heldID)

            let pruned = try await runBuilt("dopesync", ["prune", "--older-than", "30d", "--spool", spool.root])
            #expect(pruned.status == 0, "\(pruned.stderr)")
            #expect(pruned.stdout.contains("removed 1 session lock in .sessions/"), "\(pruned.stdout)")
            #expect(try fileNames(in: locks) == [heldID, newID])
            holder.kill(SIGKILL)
            _ = await holder.finished()
            let again = try await SpoolCalls.run { () throws(SpoolError) in
                try spool.holdSession(oldID, besideOlderVersions: true)
            }
            #expect(again != nil, "a session whose lock was pruned is held anew")
            await SpoolCalls.run { again?.release() }
        }
    }

    @Test("prune forgets more bundles than one transaction takes (500), batch by batch: every row goes, once")
    func pruneForgetsInBatches() async throws {
        try await withTemporarySpool { spool, _ in
            let old = Date(timeIntervalSinceNow: -10 * 86_400)
            let store = try CheckpointStore(spool: spool)
            let owner = ClaimOwner(host: "h", pid: 1, runID: "r")
            // Two batches; sessions whose bundles fall in both. Recorded on a thread of their own: a
            // thousand SQLite commits would hold one of the two threads the suite's tests share.
            let count = 501
            try await onOwnThread {
                for index in 0..<count {
                    let name = "b-\(index).tar.gz"
                    _ = FileManager.default.createFile(atPath: spool.path(.done, name), contents: Data([7]))
                    try store.recordClaim(name: name, owner: owner)
                    try store.recordDone(name: name, sessionID: "session-\(index % 7)", now: old)
                }
            }
            let result = try await runBuilt("dopesync", ["prune", "--older-than", "7d", "--spool", spool.root])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stdout.contains("pruned \(count) bundles from done/"), "\(result.stdout.suffix(300))")
            #expect(result.stdout.contains("\(count) checkpoint rows forgotten"), "\(result.stdout.suffix(300))")
            #expect(try await spool.list(.done).isEmpty)
            for index in [0, 499, 500] {
                #expect(try store.bundleState(name: "b-\(index).tar.gz") == nil, "b-\(index)")
            }
        }
    }

    @Test(
        "prune deletes only bundles done long ago (by the store's record, else mtime) and their checkpoint rows; no other folder is touched"
    )
    func pruneOnlyOldDone() async throws {
        try await withTemporarySpool { spool, _ in
            let old = Date(timeIntervalSinceNow: -10 * 86_400)
            let store = try CheckpointStore(spool: spool)
            let owner = ClaimOwner(host: "h", pid: 1, runID: "r")
            for name in ["old-1.tar.gz", "old-2.tar.gz", "new.tar.gz"] {
                _ = FileManager.default.createFile(
                    atPath: spool.path(.done, name), contents: Data(repeating: 7, count: 100))
                try store.recordClaim(name: name, owner: owner)
                try store.recordDone(
                    name: name, sessionID: "session-\(name)", now: name.hasPrefix("old") ? old : Date())
            }
            // A producer's file keeps the producer's mtime (the worker cannot set it): the store's time counts.
            try FileManager.default.setAttributes(
                [.modificationDate: old], ofItemAtPath: spool.path(.done, "new.tar.gz"))
            // Without a row, the mtime.
            _ = FileManager.default.createFile(
                atPath: spool.path(.done, "unknown-old.tar.gz"), contents: Data(repeating: 7, count: 100))
            try FileManager.default.setAttributes(
                [.modificationDate: old], ofItemAtPath: spool.path(.done, "unknown-old.tar.gz"))
            // Old files everywhere else, each with a row: none may go.
            var others: [String] = []
            for folder in [Spool.Folder.incoming, .processing, .failed, .tmp] {
                let name = "\(folder.rawValue)-old.tar.gz"
                _ = FileManager.default.createFile(atPath: spool.path(folder, name), contents: Data("keep".utf8))
                try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: spool.path(folder, name))
                others.append(spool.path(folder, name))
            }
            try store.recordClaim(name: "failed-old.tar.gz", owner: owner)
            try store.recordFailure(name: "failed-old.tar.gz", sessionID: nil, error: BundleFailure(reason: .http(422)))

            let result = try await runBuilt("dopesync", ["prune", "--older-than", "7d", "--spool", spool.root])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stdout.contains("deleted done/old-1.tar.gz (100 bytes)"))
            #expect(result.stdout.contains("pruned 3 bundles from done/, 300 bytes"), "\(result.stdout)")
            #expect(result.stdout.contains("2 checkpoint rows forgotten"))
            #expect(try spool.names(.done) == ["new.tar.gz"])
            for path in others { #expect(FileManager.default.fileExists(atPath: path), "\(path)") }
            #expect(try store.bundleState(name: "old-1.tar.gz") == nil)
            #expect(try store.bundleState(name: "old-2.tar.gz") == nil)
            #expect(try store.bundleState(name: "new.tar.gz") != nil)
            #expect(try store.bundleState(name: "failed-old.tar.gz") != nil)

            // Without --older-than: prune-after, 30 days by default; nothing here is that old.
            let byDefault = try await runBuilt("dopesync", ["prune", "--spool", spool.root])
            #expect(byDefault.status == 0 && byDefault.stdout.contains("pruned 0 bundles"), "\(byDefault.stdout)")
            #expect(try spool.names(.done) == ["new.tar.gz"])
            #expect(
                try await runBuilt("dopesync", ["prune", "--older-than", "soon", "--spool", spool.root]).status == 64)
        }
    }

    @Test("prune has one rule for zero: --older-than 0 is refused (64), as prune-after: 0 is (78); nothing deleted")
    func pruneRefusesZero() async throws {
        try await withTemporarySpool { spool, _ in
            try Data("x".utf8).write(to: URL(fileURLWithPath: spool.path(.done, "old.tar.gz")))
            let typed = try await runBuilt("dopesync", ["prune", "--older-than", "0", "--spool", spool.root])
            #expect(typed.status == 64 && typed.stderr.contains("above zero"), "\(typed.stderr)")
            let fromEnvironment = try await runBuilt(
                "dopesync", ["prune", "--spool", spool.root], environment: ["DOPESYNC_PRUNE_AFTER": "0"])
            #expect(fromEnvironment.status == 78, "\(fromEnvironment.stderr)")
            #expect(try spool.names(.done) == ["old.tar.gz"])
        }
    }

    @Test(
        "requeue and prune wait out a migrate of the SQLite checkpoints: 75, nothing moved or deleted; after it they work"
    )
    func requeueAndPruneWaitOutAMigration() async throws {
        try await withTemporarySpool { spool, _ in
            let old = Date(timeIntervalSinceNow: -10 * 86_400)
            let store = try CheckpointStore(spool: spool)
            let owner = ClaimOwner(host: "h", pid: 1, runID: "r")
            try Data("failed one".utf8).write(to: URL(fileURLWithPath: spool.path(.failed, "f.tar.gz")))
            try store.recordClaim(name: "f.tar.gz", owner: owner)
            try store.recordFailure(name: "f.tar.gz", sessionID: nil, error: BundleFailure(reason: .http(422)))
            try Data("done one".utf8).write(to: URL(fileURLWithPath: spool.path(.done, "d.tar.gz")))
            try store.recordClaim(name: "d.tar.gz", owner: owner)
            try store.recordDone(name: "d.tar.gz", sessionID: "session-d", now: old)

            // `migrate`'s lock, held here as a migration under way holds it.
            let migration = try #require(try await StoreLock.take(.exclusive, in: spool))
            let requeue = try await runBuilt("dopesync", ["requeue", "--all", "--spool", spool.root])
            #expect(requeue.status == 75, "\(requeue.stderr)")
            #expect(requeue.stderr.contains("`dopesync migrate` is copying"), "\(requeue.stderr)")
            let prune = try await runBuilt("dopesync", ["prune", "--older-than", "7d", "--spool", spool.root])
            #expect(prune.status == 75, "\(prune.stderr)")
            #expect(try spool.names(.failed) == ["f.tar.gz"])
            #expect(try spool.names(.done) == ["d.tar.gz"])
            #expect(try store.bundleState(name: "f.tar.gz")?.lastOutcome == .failed)
            #expect(try store.bundleState(name: "d.tar.gz") != nil)

            await migration.release()
            let requeued = try await runBuilt("dopesync", ["requeue", "--all", "--spool", spool.root])
            #expect(requeued.status == 0, "\(requeued.stderr)")
            #expect(try spool.names(.incoming) == ["f.tar.gz"])
            #expect(try store.bundleState(name: "f.tar.gz")?.lastOutcome == .requeued)
            let pruned = try await runBuilt("dopesync", ["prune", "--older-than", "7d", "--spool", spool.root])
            #expect(pruned.status == 0, "\(pruned.stderr)")
            #expect(try spool.names(.done).isEmpty)
            #expect(try store.bundleState(name: "d.tar.gz") == nil)
        }
    }
    @Test("a bundle dated 2 h ahead is shown by status and logged, and a run takes it by its arrival, not 2 h later")
    func aFutureMtimeIsShownAndDoesNotHoldTheBundle() async throws {
        try await withTemporarySpool { spool, directory in
            let sample = SampleSession(seed: 3960)
            let name = try pack(sample, into: spool, scratch: directory)
            try FileManager.default.setAttributes(
                [.modificationDate: Date().addingTimeInterval(7200)], ofItemAtPath: spool.path(.incoming, name))
            let status = try await runBuilt("dopesync", ["status", "--spool", spool.root])
            #expect(
                status.stdout.contains("\(name)  mtime 1h 59m in the future")
                    || status.stdout.contains("\(name)  mtime 2h 0m in the future"), "\(status.stdout)")
            let json = try await runBuilt("dopesync", ["status", "--json", "--spool", spool.root])
            let incoming = try #require(try Self.jsonObject(json.stdout)["incoming"] as? [String: Any])
            let ahead = try #require(incoming["mtimeInFuture"] as? [[String: Any]])
            #expect(ahead.first?["name"] as? String == name && (ahead.first?["secondsAhead"] as? Double ?? 0) > 7000)
            try await withDevServer { server in
                let (code, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(code == 0, "\(output)")
                #expect(output.contains("mtime is in the future"), "\(output)")
                #expect(try spool.names(.done) == [name])
            }
        }
    }

    @Test("a producer's partial file in tmp/ is counted by status and the metrics file: it fills the disk too")
    func tmpIsCounted() async throws {
        try await withTemporarySpool { spool, directory in
            try Data(count: 1 << 20).write(to: URL(fileURLWithPath: spool.path(.tmp, ".upload.part")))
            let status = try await runBuilt("dopesync", ["status", "--json", "--spool", spool.root])
            let folders = try #require(try Self.jsonObject(status.stdout)["folders"] as? [String: [String: Any]])
            #expect(folders["tmp"]?["count"] as? Int == 1 && folders["tmp"]?["bytes"] as? Int == 1 << 20, "\(folders)")
            let metrics = directory.appendingPathComponent("dopesync.prom").path
            try await withDevServer { server in
                let (code, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, ["--metrics-file", metrics])
                #expect(code == 0, "\(output)")
            }
            let text = try String(contentsOfFile: metrics, encoding: .utf8)
            #expect(text.contains(#"dopesync_spool_bundles{folder="tmp"} 1"#), "\(text)")
            #expect(text.contains(#"dopesync_spool_bytes{folder="tmp"} 1048576"#), "\(text)")
        }
    }
}
