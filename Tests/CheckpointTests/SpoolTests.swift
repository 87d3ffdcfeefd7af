import DopeSyncTestSupport
import Foundation
import Synchronization
import Testing

@testable import DopeSync
@testable import DopeSyncStore

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct SpoolTests {
    let folder: TemporaryFolder
    let spool: Spool
    let now = Date()

    init() throws {
        folder = try TemporaryFolder("spool")
        spool = Spool(root: folder.sub("spool/"))
        try spool.create()
    }

    @Test(
        "the fix named for a spool file or folder of this user's own that refuses writing: u+w for a file, u+wx for a folder"
    )
    func whatToChmod() throws {
        let (file, folder) = (spool.root + "/.dopesync.sessions.lock", spool.path(.done, ""))
        #expect(FileManager.default.createFile(atPath: file, contents: nil, attributes: [.posixPermissions: 0o400]))
        #expect(chmod(folder, 0o500) == 0)
        defer { chmod(folder, 0o755) }
        #expect(Spool.notWritableMessage(file, error: EACCES, kind: "file").hasSuffix("chmod u+w \(file)"))
        #expect(Spool.notWritableMessage(folder, error: EACCES).hasSuffix("chmod u+wx \(folder)"))
        #expect(chmod(file, 0o600) == 0)
        #expect(
            !Spool.notWritableMessage(file, error: EACCES, kind: "file").contains("chmod"), "0600 lets its owner write")
    }

    /// A bundle in `incoming/`, old enough to be due.
    func arrive(_ name: String, _ contents: String? = nil, age: TimeInterval = 60) throws {
        try writeFile(spool.path(.incoming, name), contents ?? name, modified: now.addingTimeInterval(-age))
    }

    /// Claims the first due bundle, which must be there; its moves are made of `renameCalls`.
    func claimFirstDue(renameCalls: SpoolFiles.RenameCalls = .system) throws -> ClaimedBundle {
        let entry = try #require(try spool.scan(now: now).first)
        return try #require(try spool.claim(entry, renameCalls: renameCalls))
    }

    // MARK: Create

    @Test func createMakesTheFiveFoldersAndIsIdempotent() throws {
        #expect(spool.root == folder.sub("spool"))
        #expect(try fileNames(in: spool.root) == ["done", "failed", "incoming", "processing", "tmp"])
        try spool.create()
        #expect(spool.databasePath == folder.sub("spool/dopesync.sqlite"))
        #expect(spool.databaseLockPath == folder.sub("spool/dopesync.sqlite.lock"))
    }

    @Test func createFailsClearlyWhereAFolderCannotBe() throws {
        try writeFile(folder.sub("a-file"))
        let error = #expect(throws: SpoolError.self) { try Spool(root: folder.sub("a-file/spool")).create() }
        #expect(error?.code == .cannotCreate)
        #expect(error?.isSpoolUnwritable == true)
    }

    // MARK: Scan

    @Test func scanKeepsOnlyDueRegularBundlesOldestFirst() throws {
        try arrive("b.tar.gz", age: 30)
        try arrive("a.zip", age: 90)
        try arrive("c", age: 10)
        try arrive(".hidden.tar.gz")
        try arrive("upload.tmp")
        try arrive("upload.part")
        try arrive("young.tar.gz", age: 1)
        try arrive("deferred.tar.gz", age: -3600)  // mtime in the future: its next-attempt time
        try FileManager.default.createDirectory(
            atPath: spool.path(.incoming, "folder.tar.gz"), withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(
            atPath: spool.path(.incoming, "link.tar.gz"), withDestinationPath: spool.path(.incoming, "a.zip"))
        #expect(mkfifo(spool.path(.incoming, "fifo.tar.gz"), 0o644) == 0)
        try writeFile(spool.path(.tmp, "partial.tar.gz"), modified: now.addingTimeInterval(-600))

        let due = try spool.scan(now: now, minAge: .seconds(5))
        #expect(due.map(\.name) == ["a.zip", "b.tar.gz", "c"])
        #expect(due.allSatisfy { $0.folder == .incoming && $0.size > 0 })

        let all = try spool.scan(now: now, minAge: .zero)
        #expect(all.map(\.name) == ["a.zip", "b.tar.gz", "c", "young.tar.gz"])

        let later = try spool.scan(now: now.addingTimeInterval(3601), minAge: .zero)
        #expect(later.last?.name == "deferred.tar.gz")
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment["DOPESYNC_BENCH"] != nil))
    func scanOf100000Files() throws {
        for index in 0..<100_000 {
            let descriptor = open(
                spool.path(.incoming, "bundle-\(index).tar.gz"), O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            close(descriptor)
        }
        let clock = ContinuousClock()
        var count = 0
        let elapsed = try clock.measure {
            count = try spool.scan(now: now.addingTimeInterval(60), minAge: .seconds(5)).count
        }
        print("scan of 100,000 files: \(elapsed)")
        #expect(count == 100_000)
    }

    // MARK: Claim

    @Test(
        "a bundle rewritten in place, or replaced under its name, since it was listed is not claimed until listed again"
    )
    func aFileChangedSinceListedIsNotClaimed() throws {
        try arrive("scp.tar.gz", "half")
        let listed = try #require(try spool.scan(now: now).first)
        // An scp producer writes on into the same file: its mtime is now.
        let producer = try #require(FileHandle(forWritingAtPath: spool.path(.incoming, "scp.tar.gz")))
        try producer.seekToEnd()
        try producer.write(contentsOf: Data(" more".utf8))
        try producer.close()
        #expect(try spool.claim(listed) == nil)
        #expect(try fileNames(in: spool.path(.incoming)) == ["scp.tar.gz"])

        // Another file under the same name, as old as the first was.
        try arrive("new.tar.gz", "first")
        let first = try #require(try spool.scan(now: now).first { $0.name == "new.tar.gz" })
        try writeFile(folder.sub("other"), "second", modified: first.modified)
        #expect(rename(folder.sub("other"), spool.path(.incoming, "new.tar.gz")) == 0)
        #expect(try spool.claim(first) == nil)
        // Listed again, it is claimed as it is now.
        let again = try #require(try spool.scan(now: now).first { $0.name == "new.tar.gz" })
        let claim = try #require(try spool.claim(again))
        #expect(contents(claim.path) == "second")
    }

    @Test func claimMovesIntoProcessingAndHoldsTheLock() throws {
        try arrive("b.tar.gz", "payload")
        let entry = try #require(try spool.scan(now: now).first)
        let claim = try #require(try spool.claim(entry))
        #expect(claim.name == "b.tar.gz")
        #expect(claim.isHeld)
        #expect(!claim.isOrphan)
        #expect(contents(claim.path) == "payload")
        #expect(try fileNames(in: spool.path(.incoming)).isEmpty)
        // The same entry again: gone from incoming/.
        #expect(try spool.claim(entry) == nil)
        // While held it is no orphan.
        let processing = try spool.processingEntries()
        #expect(processing.map(\.name) == ["b.tar.gz"])
        #expect(try spool.claimOrphan(processing[0]) == nil)
    }

    @Test func manyThreadsClaimingTheSameBundlesEachBundleOnce() throws {
        for index in 0..<200 { try arrive("b\(index).tar.gz") }
        let entries = try spool.scan(now: now)
        #expect(entries.count == 200)
        let spool = self.spool
        let won = Mutex<[String]>([])
        let failures = Mutex<[String]>([])
        // Eight threads walk the same list, each from a different starting point, all claiming.
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for offset in 0..<entries.count {
                let entry = entries[(offset + thread * 25) % entries.count]
                do {
                    if let claim = try spool.claim(entry) {
                        won.withLock { $0.append(claim.name) }
                        claim.release()
                    }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty)
        let claimed = won.withLock { $0 }
        #expect(claimed.count == 200)
        #expect(Set(claimed).count == 200)
        #expect(try fileNames(in: spool.path(.processing)).count == 200)
    }

    @Test func aBundleOfTheSameNameAsOneInProcessingWaits() throws {
        try arrive("b.tar.gz", "first")
        let first = try claimFirstDue()
        try arrive("b.tar.gz", "second")
        let entry = try #require(try spool.scan(now: now).first)
        #expect(try spool.claim(entry) == nil)
        #expect(contents(first.path) == "first")
        #expect(contents(spool.path(.incoming, "b.tar.gz")) == "second")
        try first.moveToDone()
        #expect(try spool.claim(entry)?.name == "b.tar.gz")
    }

    // MARK: Orphans

    @Test func anOrphanIsTakenBackOnceItsHolderReleases() throws {
        try arrive("b.tar.gz")
        let claim = try claimFirstDue()
        claim.release()  // what the kernel does when the process dies
        #expect(!claim.isHeld)
        let orphan = try #require(try spool.processingEntries().first)
        let taken = try #require(try spool.claimOrphan(orphan))
        #expect(taken.isOrphan)
        #expect(try spool.claimOrphan(orphan) == nil)
        #expect(try taken.moveToDone() == "b.tar.gz")
        // A released claim can no longer move anything.
        let error = #expect(throws: SpoolError.self) { try claim.moveToDone() }
        #expect(error?.code == .notClaimed)
    }

    @Test func anOrphanIsTakenBackAfterItsHolderProcessIsKilled() async throws {
        try arrive("b.tar.gz")
        let claim = try claimFirstDue()
        await claim.release()
        let path = spool.path(.processing, "b.tar.gz")

        // Another process holds the bundle's lock.
        let holder = try await Spawned.holdingLock(on: path)

        let entry = try #require(try await spool.processingEntries().first)
        #expect(try await spool.claimOrphan(entry) == nil)  // a live holder

        holder.kill(SIGKILL)
        #expect(await holder.finished() == 128 + SIGKILL)
        let taken = try #require(try await spool.claimOrphan(entry))
        #expect(taken.name == "b.tar.gz")
    }

    // MARK: Moves

    @Test func suffixesKeepTheArchiveExtensionReadable() {
        #expect(Spool.suffixedName("s.tar.gz", 0) == "s.tar.gz")
        #expect(Spool.suffixedName("s.tar.gz", 1) == "s.1.tar.gz")
        #expect(Spool.suffixedName("s.TAR.ZST", 2) == "s.2.TAR.ZST")
        #expect(Spool.suffixedName("s.zip", 2) == "s.2.zip")
        #expect(Spool.suffixedName("s.tgz", 3) == "s.3.tgz")
        #expect(Spool.suffixedName("session", 1) == "session.1")
        #expect(Spool.suffixedName("v1.2", 1) == "v1.2.1")
        #expect(Spool.suffixedName(".tar.gz", 1) == ".tar.gz.1")
        #expect(Spool.suffixedName("2024.05.01", 1) == "2024.05.01.1")
    }

    @Test("a suffix that would pass 255 bytes cuts the end of the base, between characters, and keeps the extension")
    func suffixesFitTheFileSystem() {
        let long = String(repeating: "ü", count: 125) + ".tgz"  // 254 bytes
        let suffixed = Spool.suffixedName(long, 1)
        #expect(suffixed == String(repeating: "ü", count: 124) + ".1.tgz", "a two-byte ü is not cut in half")
        #expect(Spool.suffixedName(long, 0) == long)
    }

    @Test func movesToDoneNeverReplace() throws {
        try writeFile(spool.path(.done, "b.tar.gz"), "old")
        try writeFile(spool.path(.done, "b.1.tar.gz"), "older")
        try arrive("b.tar.gz", "new")
        let claim = try claimFirstDue()
        #expect(try claim.moveToDone() == "b.2.tar.gz")
        #expect(!claim.isHeld)
        #expect(contents(spool.path(.done, "b.tar.gz")) == "old")
        #expect(contents(spool.path(.done, "b.1.tar.gz")) == "older")
        #expect(contents(spool.path(.done, "b.2.tar.gz")) == "new")
        #expect(try fileNames(in: spool.path(.processing)).isEmpty)
    }

    @Test func concurrentMovesToOneNameAllGetDistinctNames() throws {
        let sources = (0..<16).map { folder.sub("source-\($0)") }
        for (index, source) in sources.enumerated() { try writeFile(source, "\(index)") }
        let target = spool.path(.done)
        let spool = self.spool
        let results = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: sources.count) { index in
            let name = try? SpoolFiles.moveNoReplace(sources[index], toFolder: target, name: "same.tar.gz")
            results.withLock { $0.append(name ?? "FAILED") }
        }
        let moved = results.withLock { $0 }
        #expect(Set(moved).count == 16)
        #expect(!moved.contains("FAILED"))
        #expect(
            Set(try fileNames(in: target).compactMap { contents(spool.path(.done, $0)) })
                == Set((0..<16).map(String.init)))
    }

    @Test func giveBackLeavesTheFileAsItIsAndSuffixesATakenName() throws {
        try arrive("b.tar.gz", age: 120)
        let claim = try claimFirstDue()
        let modified = modificationTime(claim.path)
        try writeFile(
            spool.path(.incoming, "b.tar.gz"), "a newer bundle of the same name", modified: now.addingTimeInterval(-60))
        #expect(try claim.giveBack() == "b.1.tar.gz")
        #expect(modificationTime(spool.path(.incoming, "b.1.tar.gz")) == modified)
    }

    @Test func giveBackUncountedKeepsTheMtime() throws {
        try arrive("b.tar.gz", age: 120)
        let entry = try #require(try spool.scan(now: now).first)
        let claim = try #require(try spool.claim(entry))
        #expect(try claim.giveBack() == "b.tar.gz")
        #expect(modificationTime(spool.path(.incoming, "b.tar.gz")) == entry.modified)
    }

    @Test func moveToFailedWritesTheSidecarFirstAndSuffixesBoth() throws {
        try writeFile(spool.path(.failed, "b.tar.gz"), "earlier failure")
        try writeFile(spool.path(.failed, "b.tar.gz.error"), "bundle: b.tar.gz\n")
        try arrive("b.tar.gz", "this one")
        let claim = try claimFirstDue()
        let failedAt = Date(timeIntervalSince1970: 1_700_000_000)
        let sidecar = ErrorSidecar(
            bundle: "b.tar.gz", session: "S-1", failedAt: failedAt,
            failure: BundleFailure(
                reason: .http(422), step: "dope:3", httpStatus: 422, message: "ammunitionId: unknown\nsecond line"),
            attempts: 0, firstSeen: failedAt.addingTimeInterval(-5))
        #expect(try claim.moveToFailed(sidecar) == "b.1.tar.gz")
        #expect(contents(spool.path(.failed, "b.tar.gz")) == "earlier failure")
        #expect(contents(spool.path(.failed, "b.1.tar.gz")) == "this one")
        #expect(
            try fileNames(in: spool.path(.failed)) == ["b.1.tar.gz", "b.1.tar.gz.error", "b.tar.gz", "b.tar.gz.error"])
        let text = try #require(contents(spool.sidecarPath(forFailed: "b.1.tar.gz")))
        #expect(
            text == """
                bundle: b.1.tar.gz
                session: S-1
                failed_at: 2023-11-14T22:13:20Z
                reason: http_422
                step: dope:3
                http_status: 422
                message: ammunitionId: unknown\\nsecond line
                attempts: 0
                first_seen: 2023-11-14T22:13:15Z

                """)
        var expected = sidecar
        expected.bundle = "b.1.tar.gz"
        #expect(ErrorSidecar.read(from: spool.sidecarPath(forFailed: "b.1.tar.gz")) == expected)
        #expect(try spool.list(.failed).map(\.name).sorted() == ["b.1.tar.gz", "b.tar.gz"])
    }

    // MARK: Sidecar

    @Test func sidecarRoundTripsAndToleratesWhatItDoesNotKnow() throws {
        let sidecar = ErrorSidecar(
            bundle: "x", failedAt: Date(timeIntervalSince1970: 0), reason: FailureReason(.invalidSession),
            message: "a\\b\r\nc\u{2028}d: e")
        #expect(
            sidecar.rendered()
                == "bundle: x\nfailed_at: 1970-01-01T00:00:00Z\nreason: invalid_session\nmessage: a\\\\b\\r\\nc\u{2028}d: e\n"
        )
        #expect(ErrorSidecar(parsing: sidecar.rendered()) == sidecar)

        let parsed = try #require(
            ErrorSidecar(
                parsing:
                    "reason: r\r\nfailed_at: 2024-05-01T12:00:00Z\r\nbundle: b\nnoise\nfuture_key: v\nhttp_status: nope\n"
            ))
        #expect(parsed.bundle == "b")
        #expect(parsed.httpStatus == nil)
        #expect(parsed.otherFields == ["future_key": "v"])
        #expect(ErrorSidecar(parsing: "bundle: b\nreason: r\n") == nil)  // no failed_at
        #expect(ErrorSidecar.read(from: folder.sub("missing.error")) == nil)
    }
}

/// ``IncomingQueue``'s rules on real listings and real store rows: retry times from the store,
/// whoever owns the file; `touch` makes a deferred bundle due; arrival order, not mtime.
@Suite struct IncomingQueueTests {
    @Test("a deferred bundle waits for the store's next-attempt time, not its mtime; touched, it is due at once")
    func retryTimeComesFromTheStore() async throws {
        try await withTemporaryDirectory { directory in
            let spool = Spool(root: directory.path)
            try await spool.create()
            let store = try CheckpointStore(spool: spool)
            let now = Date()
            try writeFile(spool.path(.incoming, "deferred.tgz"), "d", modified: now.addingTimeInterval(-3600))
            let deferral = try store.recordDeferral(
                name: "deferred.tgz", sessionID: nil, error: BundleFailure(reason: .unreachable), now: now)
            func queue(at time: Date) throws -> IncomingQueue {
                IncomingQueue(
                    incoming: try spool.list(.incoming), states: try store.bundlesInFlight(), now: time,
                    minAge: .seconds(5))
            }
            #expect(try queue(at: now).waitingForRetry.map(\.entry.name) == ["deferred.tgz"])
            #expect(try queue(at: now).due.isEmpty)
            #expect(try queue(at: deferral.nextAttemptAt.addingTimeInterval(0.001)).due.map(\.name) == ["deferred.tgz"])
            // `touch`: modified after it was given back.
            try writeFile(spool.path(.incoming, "deferred.tgz"), "d", modified: now.addingTimeInterval(1))
            #expect(try queue(at: now.addingTimeInterval(2)).heldByMinAge.map(\.name) == ["deferred.tgz"])
            #expect(try queue(at: now.addingTimeInterval(7)).due.map(\.name) == ["deferred.tgz"])
        }
    }

    @Test(
        "a deferral recorded ahead of this clock by more than its tolerance is due now (the clock went back); a little ahead, another host's, it holds"
    )
    func aDeferralFromAClockThatWentBackIsDue() async throws {
        try await withTemporaryDirectory { directory in
            let spool = Spool(root: directory.path)
            try await spool.create()
            let store = try CheckpointStore(spool: spool)
            let now = Date()
            for (name, recordedAhead) in [("slightly.tgz", 60.0), ("far.tgz", 86_400.0)] {
                try writeFile(spool.path(.incoming, name), "d", modified: now.addingTimeInterval(-3600))
                _ = try store.recordDeferral(
                    name: name, sessionID: nil, error: BundleFailure(reason: .unreachable),
                    now: now.addingTimeInterval(recordedAhead))
            }
            let queue = IncomingQueue(
                incoming: try await spool.list(.incoming), states: try store.bundlesInFlight(), now: now,
                minAge: .seconds(5))
            #expect(queue.due.map(\.name) == ["far.tgz"])
            #expect(queue.waitingForRetry.map(\.entry.name) == ["slightly.tgz"])
            #expect(queue.deferredAhead.map(\.entry.name) == ["far.tgz"])
            #expect(abs((queue.deferredAhead.first?.ahead ?? 0) - 86_400) < 1)
        }
    }

    @Test(
        "files and deferrals written under a clock that has gone back a year since are due, not held by min-age or their retry time until it catches up"
    )
    func filesFromAClockThatWentBackAreDue() async throws {
        try await withTemporaryDirectory { directory in
            let spool = Spool(root: directory.path)
            try await spool.create()
            let store = try CheckpointStore(spool: spool)
            let written = Date()
            try writeFile(spool.path(.incoming, "deferred.tgz"), "d", modified: written)
            try writeFile(spool.path(.incoming, "fresh.tgz"), "f", modified: written)
            _ = try store.recordDeferral(
                name: "deferred.tgz", sessionID: nil, error: BundleFailure(reason: .unreachable), now: written)
            // The listing read by a clock a year behind the one that wrote them: their mtimes, and
            // the ctimes the kernel gave them, are a year ahead of it.
            let yearBefore = written.addingTimeInterval(-365 * 86_400)
            let queue = IncomingQueue(
                incoming: try await spool.list(.incoming), states: try store.bundlesInFlight(), now: yearBefore,
                minAge: .seconds(5))
            #expect(queue.due.map(\.name).sorted() == ["deferred.tgz", "fresh.tgz"])
            #expect(queue.heldByMinAge.isEmpty && queue.waitingForRetry.isEmpty)
            #expect(queue.deferredAhead.map(\.entry.name) == ["deferred.tgz"])
            // A file written a moment ago by the right clock is still held by min-age, and so is one
            // whose mtime a producer set an hour ahead: its ctime is now.
            try writeFile(spool.path(.incoming, "ahead.tgz"), "a", modified: written.addingTimeInterval(3600))
            let justWritten = IncomingQueue(
                incoming: try await spool.list(.incoming), states: [:], now: written, minAge: .seconds(5))
            #expect(justWritten.heldByMinAge.count == 3 && justWritten.due.isEmpty)
            // Read by a clock an hour behind the file server's (its ctimes an hour ahead): a file
            // being written is still held, whatever its times say.
            let serverAhead = IncomingQueue(
                incoming: try await spool.list(.incoming), states: [:], now: written.addingTimeInterval(-3600),
                minAge: .seconds(5))
            #expect(serverAhead.heldByMinAge.count == 3 && serverAhead.due.isEmpty)
        }
    }

    @Test(
        "a bundle first seen under a clock that has gone back since ages from its arrival in incoming/, so the stuck-bundle alert can fire"
    )
    func aFirstSeenTimeAheadDoesNotHideABundlesAge() async throws {
        try await withTemporaryDirectory { directory in
            let spool = Spool(root: directory.path)
            try await spool.create()
            let store = try CheckpointStore(spool: spool)
            let arrived = Date()
            try writeFile(spool.path(.incoming, "b.tgz"), "b", modified: arrived)
            try store.recordClaim(
                name: "b.tgz", owner: ClaimOwner(host: "h", pid: 1, runID: "r"),
                now: arrived.addingTimeInterval(365 * 86_400))
            let twoHoursOn = arrived.addingTimeInterval(7200)
            let backlog = try await SpoolBacklog.list(spool, inFlight: try store.bundlesInFlight(), now: twoHoursOn)
            let age = try #require(backlog.folders["incoming"]?.oldestAgeSeconds)
            #expect(abs(age - 7200) < 60, "from its ctime, not 0: \(age)")
        }
    }

    @Test("the due are taken in the order they arrived, whatever mtime a producer gave its file")
    func arrivalOrderNotMtime() async throws {
        try await withTemporaryDirectory { directory in
            let spool = Spool(root: directory.path)
            try await spool.create()
            let now = Date()
            // Arrives first, mtime now; then a file claiming to be from 2001. (Should both arrive in
            // one tick of the kernel's clock, their names keep the same order: sorting by mtime
            // would put the second first either way.)
            try writeFile(spool.path(.incoming, "first.tgz"), "1", modified: now.addingTimeInterval(-10))
            try writeFile(
                spool.path(.incoming, "second.tgz"), "2", modified: Date(timeIntervalSince1970: 1_000_000_000))
            let queue = IncomingQueue(
                incoming: try await spool.list(.incoming), states: [:], now: now.addingTimeInterval(60),
                minAge: .seconds(5))
            #expect(queue.due.map(\.name) == ["first.tgz", "second.tgz"])
        }
    }
}
