import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Synchronization
import Testing

@testable import DopeSync
@testable import DopeSyncStore

/// Two bundles of one session (a producer that sends a session again, `S.tar.gz` and
/// `S.1.tar.gz`) are never uploaded at the same time (``SessionHold``): each would look on the
/// server before the other's records were there and, against an API that ignores keys, send them
/// again. Over real sockets to the dev server, with the built `dopesync run`.
@Suite(.timeLimit(minutes: 3)) struct OneBundleOfASessionAtATimeTests {
    @Test(
        "two bundles of one session in one run, against an API that ignores keys: one uploads, the other waits for the next run, and every record exists once"
    )
    func twoBundlesOfASessionInOneRun() async throws {
        try await withTemporarySpool { spool, scratch in
            let sample = SampleSession(seed: 9_800, shape: .realistic)
            let first = try pack(sample, into: spool, scratch: scratch)
            let second = try pack(sample, into: spool, scratch: scratch.appendingPathComponent("again"))
            #expect(try spool.names(.incoming) == [first, second].sorted())
            var configuration = DevServerConfiguration()
            configuration.ignoreIdempotencyKeys = true
            // Each bundle's 50 POSTs take half a second or more: both are claimed and read
            // while the first still uploads.
            configuration.faults.latencyMilliseconds = 10...10
            try await withDevServer(configuration) { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, ["--concurrency", "2"])
                #expect(status == 0, "\(output)")
                #expect(output.contains("another bundle of this session is being uploaded"), "\(output)")
                #expect(try spool.names(.done).count == 1 && spool.names(.incoming).count == 1)

                let (again, againOutput) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(again == 0, "\(againOutput)")
                #expect(try spool.names(.done).count == 2)
                // No file a session: the holds are bytes of one file (in a container, where this
                // process cannot see every lock, a file too, in case an older version runs).
                if StoreLock.seesEveryProcessesLocks {
                    #expect(!FileManager.default.fileExists(atPath: spool.root + "/" + SessionHold.legacyFolder))
                }
                // One session (the lookup fails on two), and each of its records once.
                let tree = try await server.sessionTree(clientID: sample.sessionID)
                #expect(tree.dope.count == 15)
                #expect(tree.chrono.map(\.readings.count) == [10, 10])
                #expect(tree.groups.map(\.images.count) == [1, 1, 1, 1])
            }
        }
    }

    @Test("a session held by another process is busy, and its hold ends with that process, however it ends")
    func aHoldEndsWithItsHolder() async throws {
        try await withTemporarySpool { spool, _ in
            let sessionID = "5e2b8a1c-0d4f-4b7e-9a3c-2f6d8e1b4c7a"
            // Another process holds the session's byte as a run's bundle would, then is killed.
            let holder = try await Spawned.holdingByte(
                SessionHold.byte(of: sessionID), of: spool.root + "/" + SessionHold.fileName)
            #expect(try await SpoolCalls.run { () throws(SpoolError) in try spool.holdSession(sessionID) } == nil)
            holder.kill(SIGKILL)
            _ = await holder.finished()
            let hold = try await SpoolCalls.run { () throws(SpoolError) in try spool.holdSession(sessionID) }
            #expect(hold != nil, "the holder is gone")
            // Held here now: a second ask, as another slot's, is busy until released; another
            // session is not.
            #expect(try await SpoolCalls.run { () throws(SpoolError) in try spool.holdSession(sessionID) } == nil)
            let other = try await SpoolCalls.run { () throws(SpoolError) in
                try spool.holdSession("0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5")
            }
            #expect(other != nil)
            await SpoolCalls.run {
                hold?.release()
                other?.release()
            }
            #expect(try await SpoolCalls.run { () throws(SpoolError) in try spool.holdSession(sessionID) } != nil)
        }
    }

    @Test(
        "beside a run of an older version, which holds .sessions/ID: that session's bundle waits, uncounted; once it has ended, the bundle uploads"
    )
    func besideARunOfAnOlderVersion() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 9_860)
            let spool = try await makeSpool(in: directory, samples: [sample])
            let olderRun = try await OlderRun.uploading(sample.sessionID, in: spool)
            try await withDevServer { server in
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == 0, "\(output)")
                #expect(output.contains("another bundle of this session is being uploaded"), "\(output)")
                #expect(try spool.names(.incoming) == ["\(sample.sessionID).tar.gz"])
                #expect((try await server.createdCounts()["session"] ?? 0) == 0)

                await olderRun.end()
                let (again, againOutput) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(again == 0, "\(againOutput)")
                #expect(try spool.names(.done) == ["\(sample.sessionID).tar.gz"])
                #expect(try await server.createdCounts()["session"] == 1)
            }
        }
    }

    @Test(
        "a hold beside an older version's run also holds .sessions/ID, so that run finds the session busy; who shares the checkpoints' lock decides"
    )
    func aHoldBesideAnOlderVersionLocksItsFileToo() async throws {
        try await withTemporarySpool { spool, _ in
            let sessionID = "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"
            let legacyFile = spool.root + "/" + SessionHold.legacyFolder + "/" + sessionID
            let hold = try await SpoolCalls.run { () throws(SpoolError) in
                try spool.holdSession(sessionID, besideOlderVersions: true)
            }
            #expect(hold != nil)
            await #expect(throws: ProcessFailure.self, "an older version's flock is refused") {
                try await Spawned.holdingLock(on: legacyFile)
            }
            await SpoolCalls.run { hold?.release() }
            let olderVersions = try await Spawned.holdingLock(on: legacyFile)
            olderVersions.kill(SIGKILL)
            _ = await olderVersions.finished()

            // This process's own shared lock is no other run; another process's is.
            let own = try #require(
                try await SpoolCalls.run { () throws(SpoolError) in try StoreLock.take(.shared, in: spool) })
            #expect(
                await SpoolCalls.run { StoreLock.isHeldByAnotherProcess(spool) } == !StoreLock.seesEveryProcessesLocks)
            let other = try await Spawned.holdingLock(on: StoreLock.path(spool), shared: true)
            // Read a page at a time while the suite's other processes take and drop locks, the
            // list can miss one on a read (StoreLock.isHeldByAnotherProcess): a lock held all
            // along is seen on one of a few.
            #expect(await SpoolCalls.run { (1...5).contains { _ in StoreLock.isHeldByAnotherProcess(spool) } })
            other.kill(SIGKILL)
            _ = await other.finished()
            await SpoolCalls.run { own.release() }
        }
    }

    @Test(
        "a run's shared checkpoints' lock tells whether another process held it: alone no, beside another run yes, and a migration's still keeps it out"
    )
    func theStoreLockTellsWhoElseHeldIt() async throws {
        try await withTemporarySpool { spool, scratch in
            func take() async throws -> StoreLock? {
                try await SpoolCalls.run { () throws(SpoolError) in try StoreLock.take(.run, in: spool) }
            }
            let alone = try #require(try await take())
            #expect(!alone.othersHeldItWhenTaken)
            await SpoolCalls.run { alone.release() }

            // Asked while 300 other locks come and go, as the test suite's do: /proc/locks, read a
            // page at a time, then leaves out one now and then, and missed the other run's so.
            let other = try await Spawned.holdingLock(on: StoreLock.path(spool), shared: true)
            let churn = LockChurn(file: scratch.appendingPathComponent("churn").path, descriptors: 300)
            for _ in 0..<50 {
                let beside = try #require(try await take())
                #expect(beside.othersHeldItWhenTaken)
                await SpoolCalls.run { beside.release() }
            }
            churn.stop()
            other.kill(SIGKILL)
            _ = await other.finished()
            let afterwards = try #require(try await take())
            #expect(!afterwards.othersHeldItWhenTaken, "its lock went with it")
            await SpoolCalls.run { afterwards.release() }

            let migration = try await Spawned.holdingLock(on: StoreLock.path(spool))
            #expect(try await take() == nil, "a migration holds it")
            migration.kill(SIGKILL)
            _ = await migration.finished()
        }
    }

    @Test(
        "on NFS, where the checkpoints' lock cannot be asked exclusive through a descriptor open for reading, a run alone still holds sessions by the byte alone",
        .enabled(if: StoreLock.seesEveryProcessesLocks, "the answer then comes from /proc/locks"))
    func aRunAloneOnNFSHoldsByTheByte() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 9_880)
            let spool = try await makeSpool(in: directory, samples: [sample])
            let nfs = try await NFSLocks(in: directory, locksOf: "/.dopesync.store.lock")
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, environment: nfs.environment)
                #expect(status == 0, "\(output)")
                #expect(try spool.names(.done) == ["\(sample.sessionID).tar.gz"])
                #expect(!FileManager.default.fileExists(atPath: spool.root + "/" + SessionHold.legacyFolder))
            }
        }
    }

    @Test(
        "a run started beside an older run knows it from its first hold: slots holding that session at once all find it busy, none goes on with the byte alone"
    )
    func aRunBesideAnOlderRunKnowsItFromTheStart() async throws {
        try await withTemporarySpool { spool, _ in
            let sessionID = "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"
            let olderRun = try await OlderRun.uploading(sessionID, in: spool)
            var outcomes: [String] = []
            for _ in 0..<10 {
                let lock = try #require(
                    try await SpoolCalls.run { () throws(SpoolError) in try StoreLock.take(.run, in: spool) })
                let claims = SpoolClaims(othersHeldTheStoreLock: lock.othersHeldItWhenTaken)
                outcomes += await withTaskGroup(of: String.self) { group in
                    for slot in 0..<8 {
                        group.addTask {
                            let claimed = ClaimedBundle(
                                spool: spool, name: "slot\(slot).tar.gz", descriptor: open("/dev/null", O_RDONLY),
                                identity: FileIdentity(device: 0, inode: 0), size: 0, modified: Date(),
                                isOrphan: false, renameCalls: .system)
                            switch await claims.holdSession(sessionID, of: claimed) {
                            case .held(let hold):
                                await SpoolCalls.run { hold.release() }
                                return "held"
                            case .busy: return "busy"
                            default: return "other"
                            }
                        }
                    }
                    return await group.reduce(into: []) { $0.append($1) }
                }
                await SpoolCalls.run { lock.release() }
            }
            #expect(outcomes == Array(repeating: "busy", count: 80))
            await olderRun.end()
        }
    }

    @Test(
        "a run told at its start that it is alone asks again at its first hold, then once a minute until yes, then never"
    )
    func whenARunAsksAfterOlderRuns() {
        let start = ContinuousClock.now
        var watch = SpoolClaims.OlderRunsWatch(seenAtStart: false)
        var asks: [Bool] = []
        asks.append(watch.isDue(now: start))
        let first = watch.answered(false)
        asks.append(watch.isDue(now: start + .seconds(59)))
        asks.append(watch.isDue(now: start + .seconds(60)))
        let second = watch.answered(true)
        asks.append(watch.isDue(now: start + .seconds(600)))
        let third = watch.answered(false)
        #expect(asks == [true, false, true, false], "at the first hold; not at every hold; a minute on; a yes is kept")
        #expect([first, second, third] == [false, true, true])

        var besideAnother = SpoolClaims.OlderRunsWatch(seenAtStart: true)
        #expect(besideAnother.seen && !besideAnother.isDue(now: start), "told at the start")
    }

    @Test(
        "a spool file for the holds the worker may not write (an earlier run as root made it) stops the run with 73, naming it and the chown; nothing is sent without the hold",
        .enabled(if: geteuid() == 0, "needs root to make the worker's user"))
    func sessionLocksTheWorkerMayNotWrite() async throws {
        let worker = "dopesync-t-holds-" + UUID().uuidString.prefix(8).lowercased()
        try await SessionOwnershipTests.withProducers([worker]) { uids in
            try await withTemporaryDirectory { directory in
                let sample = SampleSession(seed: 9_820)
                let spool = try await makeSpool(in: directory, samples: [sample])
                let name = "\(sample.sessionID).tar.gz"
                #expect(spool.give(to: uids[0], with: [spool.path(.incoming, name)], opening: directory))
                // Root's, as a run with --allow-root leaves it.
                let holds = spool.root + "/" + SessionHold.fileName
                let made = open(holds, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
                #expect(made >= 0)
                close(made)
                try await withDevServer { server in
                    let run = try await runDopesync(as: worker, run: spool, against: server)
                    #expect(run.status == 73, "\(run.stderr)")
                    #expect(run.stderr.contains("cannot hold the session while its bundle uploads"), "\(run.stderr)")
                    #expect(run.stderr.contains("chown \(worker) \(holds)"), "\(run.stderr)")
                    #expect(try spool.names(.incoming) == [name], "given back, in one folder")
                    #expect((try await server.createdCounts()["session"] ?? 0) == 0, "nothing sent without the hold")

                    #expect(chown(holds, uids[0], uids[0]) == 0)
                    let again = try await runDopesync(as: worker, run: spool, against: server)
                    #expect(again.status == 0, "\(again.stderr)")
                    #expect(try spool.names(.done) == [name])
                    #expect(try await server.createdCounts()["session"] == 1)
                }
            }
        }
    }

    @Test(
        "only a file system without locks lets a bundle go on without its hold; no descriptor left, or a lock file removed again and again, gives it back"
    )
    func whenABundleGoesOnWithoutItsHold() {
        func outcome(_ code: SpoolError.Code, _ errno: Int32?) -> String {
            switch SpoolClaims.outcome(of: SpoolError(code: code, message: "m", errno: errno)) {
            case .held: "held"
            case .busy: "busy"
            case .unavailable: "go on without"
            case .spoolNotWritable: "stop the run"
            case .failed: "give back"
            }
        }
        #expect(outcome(.claimFailed, ENOLCK) == "go on without")
        #expect(outcome(.claimFailed, EOPNOTSUPP) == "go on without")
        #expect(outcome(.claimFailed, nil) == "give back", "the lock file kept being removed")
        #expect(outcome(.notWritable, EMFILE) == "give back")
        #expect(outcome(.notWritable, EACCES) == "stop the run")
        #expect(outcome(.notWritable, EROFS) == "stop the run")
        #expect(outcome(.notWritable, ELOOP) == "stop the run", ".sessions a symbolic link")
        #expect(outcome(.notWritable, ENOTDIR) == "stop the run", ".sessions a file")
        #expect(outcome(.notWritable, EISDIR) == "stop the run", ".dopesync.sessions.lock a folder")
    }

    @Test(
        "a session that cannot be held for want of a descriptor: the bundle goes back uncounted, and the run exits 75, not 0"
    )
    func aHoldThatFailsIsNoQuietSuccess() async throws {
        try await withTemporaryDirectory { directory in
            let sample = SampleSession(seed: 9_840)
            let spool = try await makeSpool(in: directory, samples: [sample])
            let refused = try await OpenRefused(in: directory, opensOf: "/" + SessionHold.fileName, failWith: EMFILE)
            try await withDevServer { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, environment: refused.environment)
                #expect(status == 75, "\(output)")
                #expect(output.contains("cannot hold the session while its bundle uploads"), "\(output)")
                #expect(output.contains("cannot open the sessions' lock file: Too many open files"), "\(output)")
                #expect(!output.contains("chmod") && !output.contains("chown"), "no owner or mode to blame")
                #expect(try spool.names(.incoming) == ["\(sample.sessionID).tar.gz"], "given back")
                let state = try CheckpointStore(spool: spool).bundleState(name: "\(sample.sessionID).tar.gz")
                #expect(
                    state?.attempts == 0 && state?.lastOutcome == .returned, "uncounted: \(String(describing: state))")
                #expect((try await server.createdCounts()["session"] ?? 0) == 0, "nothing sent without the hold")
            }
        }
    }
}

/// Locks that come and go on a thread of their own until stopped: shared `flock`s on
/// `descriptors` open descriptions of `file`, all let go, then all taken again, each a line of
/// /proc/locks that comes and goes.
final class LockChurn: Sendable {
    private let stopped = Atomic(false)
    private let done = DispatchSemaphore(value: 0)

    init(file: String, descriptors count: Int) {
        let descriptors = (0..<count).map { _ in open(file, O_RDONLY | O_CREAT | O_CLOEXEC, 0o600) }
        Thread.detachNewThread { [self] in
            for descriptor in descriptors { flock(descriptor, LOCK_SH | LOCK_NB) }
            while !self.stopped.load(ordering: .relaxed) {
                for descriptor in descriptors { flock(descriptor, LOCK_UN) }
                for descriptor in descriptors { flock(descriptor, LOCK_SH | LOCK_NB) }
            }
            for descriptor in descriptors { close(descriptor) }
            self.done.signal()
        }
    }

    /// Stops the churn and lets every lock go.
    func stop() {
        stopped.store(true, ordering: .relaxed)
        done.wait()
    }
}

/// What a run of a build before `.dopesync.sessions.lock` holds while it uploads a bundle of a
/// session, in processes of its own: the checkpoints' lock, shared, and `.sessions/ID`.
struct OlderRun {
    let holders: [Spawned]

    static func uploading(_ sessionID: String, in spool: Spool) async throws -> OlderRun {
        let run = try await Spawned.holdingLock(on: StoreLock.path(spool), shared: true)
        let bundle = try await Spawned.holdingLock(on: spool.root + "/" + SessionHold.legacyFolder + "/" + sessionID)
        return OlderRun(holders: [bundle, run])
    }

    /// Ends it as a crash would: its locks go with its processes.
    func end() async {
        for holder in holders {
            holder.kill(SIGKILL)
            _ = await holder.finished()
        }
    }
}
