import DopeSyncTestSupport
import Foundation
import SQLiteSupport
import Testing

@testable import DopeSync
@testable import DopeSyncStore

@Suite struct CheckpointStoreTests {
    let folder: TemporaryFolder
    let now = Date(timeIntervalSince1970: 1_700_000_000)
    init() throws { folder = try TemporaryFolder("store") }

    @Test("readings cut short count in a row: one that ends (the claim recorded with its session) starts again")
    func readingsCutShortCountInARow() throws {
        let store = try open()
        let owner = ClaimOwner(host: "h", pid: 1, runID: "r")
        // Three readings that never ended: the mark set, then counted twice.
        #expect(try (0..<3).map { _ in try store.beginReading(name: "b.tar.gz") } == [0, 1, 2])
        // One that ends: validated, its claim recorded with the session.
        try store.recordClaim(name: "b.tar.gz", sessionID: "S", owner: owner, totalSteps: 1)
        #expect(try store.beginReading(name: "b.tar.gz") == 0, "the earlier ones count no more")
        #expect(try store.beginReading(name: "b.tar.gz") == 1)
        // A claim recorded without a session (not a reading that ended) keeps the count.
        try store.recordClaim(name: "b.tar.gz", owner: owner)
        #expect(try store.beginReading(name: "b.tar.gz") == 1)
    }

    /// The test's database; `clock` says what the store is told of the clock (the system's by default).
    func open(clock: ClockFacts = .system) throws -> CheckpointStore {
        try CheckpointStore(path: folder.sub("dopesync.sqlite"), now: now, clock: clock)
    }

    // MARK: Migrations

    /// Spelled out, so a migration dropped or renamed by mistake fails here.
    static let allMigrations = [
        "v1-steps-bundles-runs", "v2-runs-healthy", "v3-bundles-reading", "v4-runs-api-lookups", "v5-reference-lists",
        "v6-bundles-steps-done-counted", "v7-bindings", "v8-bundles-first-seen-on-boot",
    ]

    /// A step's checkpoint rewrites a row or two: the store asks for small pages, so each commit's
    /// WAL frames are small. (That a file made before keeps its pages and opens as ever is
    /// `SQLiteDatabaseTests`' and `aVersion1DatabaseIsUpgradedInPlaceKeepingItsRows`'.)
    @Test func aNewDatabaseHasSmallPages() throws {
        let store = try open()
        try store.recordIntent(
            sessionID: "S", stepKey: "session", idempotencyKey: "k", requestFingerprint: "f", contentDigest: "d",
            bundleName: "b.tar.gz")
        let pageSize: Int? = try SQLiteDatabase(path: store.path).read {
            try $0.queryFirst("PRAGMA page_size")?["page_size"]
        }
        #expect(pageSize == 1024)
    }

    @Test func aVersion1DatabaseIsUpgradedInPlaceKeepingItsRows() throws {
        let path = folder.sub("v1.sqlite")
        let v1 = try SQLiteDatabase(path: path)
        try CheckpointMigrator.migrate(v1, migrations: Array(checkpointMigrations.prefix(1)), now: 0)
        try v1.write { connection in
            _ = try connection.query(
                """
                INSERT INTO runs (run_id, host, pid, started_at, finished_at, claimed, done, deferred, failed, requests, bytes, seconds, exit_code)
                VALUES ('old', 'h', 1, 1, 2, 0, 0, 0, 0, 0, 0, 1.0, 0)
                """
            )
        }
        let store = try CheckpointStore(path: path)
        #expect(try store.appliedMigrations() == Self.allMigrations)
        #expect(try store.lastFinishedRun()?.runID == "old")
        #expect(
            try store.lastHealthyRunFinishedAt(notAfter: Date()) == nil, "a run from before the column was not judged")
        try store.recordRunStarted(runID: "new", host: "h", pid: 2, startedAt: Date(timeIntervalSince1970: 10))
        try store.recordRunFinished(
            runID: "new", summary: RunSummary(claimed: 1, done: 1), healthy: true,
            finishedAt: Date(timeIntervalSince1970: 20))
        #expect(try store.lastHealthyRunFinishedAt(notAfter: Date()) == Date(timeIntervalSince1970: 20))
        #expect(
            try store.lastHealthyRunFinishedAt(notAfter: Date(timeIntervalSince1970: 19)) == nil, "stamped after then")
    }

    /// Before v6 a bundle's steps done were a column each result updated; since, they are counted
    /// from its session's steps when read. A database from before loses the column, not the count.
    @Test func aVersion5DatabaseCountsABundlesStepsDoneFromItsSession() throws {
        let path = folder.sub("v5.sqlite")
        let v5 = try SQLiteDatabase(path: path)
        try CheckpointMigrator.migrate(v5, migrations: Array(checkpointMigrations.prefix(5)), now: 0)
        try v5.write { connection in
            try connection.execute(
                """
                INSERT INTO bundles (name, session_id, first_seen, updated_at, steps_done, steps_total)
                    VALUES ('b.tar.gz', 'S', 1, 1, 7, 3);
                INSERT INTO steps (session_id, step_key, idempotency_key, request_fingerprint, content_digest, state,
                    server_id, sent_at, done_at, bundle_name) VALUES
                    ('S', 'session', 'k1', 'f', 'd', 'done', 1, 1, 1, 'b.tar.gz'),
                    ('S', 'dope/0', 'k2', 'f', 'd', 'done', 2, 1, 1, 'b.tar.gz'),
                    ('S', 'dope/1', 'k3', 'f', 'd', 'sent', NULL, 1, NULL, 'b.tar.gz'),
                    ('T', 'session', 'k4', 'f', 'd', 'done', 3, 1, 1, 'other.tar.gz');
                """)
        }
        v5.close()
        let store = try CheckpointStore(path: path)
        let columns = try SQLiteDatabase(path: path).read { connection in
            try connection.query("PRAGMA table_info(bundles)").map { row -> String in try row["name"] }
        }
        #expect(!columns.contains("steps_done"))
        #expect(try store.bundleState(name: "b.tar.gz")?.stepsDone == 2)
        #expect(try store.bundles().allSatisfy { $0.stepsDone == nil }, "counted for one bundle's read, not in lists")
        try store.recordResult(sessionID: "S", stepKey: "dope/1", serverID: 4)
        #expect(try store.bundleState(name: "b.tar.gz")?.stepsDone == 3)
    }

    @Test func freshDatabaseGetsEveryMigrationOnceAndReopensWithoutChange() throws {
        let store = try open()
        #expect(try store.appliedMigrations() == Self.allMigrations)
        #expect(store.lockPath == folder.sub("dopesync.sqlite.lock"))
        #expect(FileManager.default.fileExists(atPath: store.lockPath))
        let again = try open()
        #expect(try again.appliedMigrations() == Self.allMigrations)
        let mode = try SQLiteDatabase(path: store.path).read {
            try $0.queryFirst("PRAGMA journal_mode")?["journal_mode"] as String?
        }
        #expect(mode == "wal")
    }

    @Test func manyStoresOpeningAtOnceMigrateOnce() async throws {
        let path = folder.sub("race.sqlite")
        let results = await withTaskGroup(of: Result<[String], CheckpointError>.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    // A dedicated thread per opener, so the openings really overlap.
                    await withCheckedContinuation { continuation in
                        Thread.detachNewThread {
                            continuation.resume(
                                returning: Result { () throws(CheckpointError) in
                                    try CheckpointStore(path: path).appliedMigrations()
                                })
                        }
                    }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.count == 8)
        for result in results {
            let applied = try result.get()
            #expect(applied == Self.allMigrations)
        }
    }

    @Test func aDatabaseFromANewerVersionIsRefused() throws {
        let store = try open()
        let path = store.path
        let raw = try SQLiteDatabase(path: path)
        try raw.write {
            _ = try $0.query("INSERT INTO schema_migrations (name, applied_at) VALUES ('v99-from-the-future', 0)")
        }
        let error = #expect(throws: CheckpointError.self) { try CheckpointStore(path: path) }
        #expect(error?.code == .schemaTooNew)
    }

    @Test func openErrorsHaveCodes() throws {
        let missingFolder = #expect(throws: CheckpointError.self) {
            try CheckpointStore(path: folder.sub("no/such/folder/db.sqlite"))
        }
        #expect(missingFolder?.code == .cannotOpen)

        try writeFile(folder.sub("garbage.sqlite"), String(repeating: "this is not a database ", count: 100))
        let garbage = #expect(throws: CheckpointError.self) { try CheckpointStore(path: folder.sub("garbage.sqlite")) }
        #expect(garbage?.code == .corrupt)
        #expect(garbage?.message.contains("garbage.sqlite") == true)
    }

    // MARK: Steps

    @Test func intentThenResultThenCompleted() throws {
        let store = try open()
        try store.recordClaim(
            name: "b.tar.gz", sessionID: "S", owner: ClaimOwner(host: "h", pid: 1, runID: "r1"), totalSteps: 1, now: now
        )
        let first = try store.recordIntent(
            sessionID: "S", stepKey: "session", idempotencyKey: "k1", requestFingerprint: "f1",
            contentDigest: "d1", bundleName: "b.tar.gz", now: now)
        #expect(first == .recorded)
        #expect(try store.completedSteps(sessionID: "S").isEmpty)

        // No answer came; the step is sent again.
        let again = try store.recordIntent(
            sessionID: "S", stepKey: "session", idempotencyKey: "k1", requestFingerprint: "f1",
            contentDigest: "d1", bundleName: "b.tar.gz", now: now.addingTimeInterval(5))
        #expect(again == .resent(previousFingerprint: "f1"))

        let done = try store.recordResult(
            sessionID: "S", stepKey: "session", serverID: 41, now: now.addingTimeInterval(6))
        #expect(done.serverID == 41)
        let completed = try store.completedSteps(sessionID: "S")
        #expect(
            completed == [
                "session": CompletedStep(serverID: 41, contentDigest: "d1", doneAt: now.addingTimeInterval(6))
            ])

        // The same result again is harmless; the result counted once toward the bundle's progress.
        try store.recordResult(sessionID: "S", stepKey: "session", serverID: 41)
        let bundle = try #require(try store.bundleState(name: "b.tar.gz"))
        #expect(bundle.stepsDone == 1)
        #expect(bundle.sessionID == "S")

        // A done step is never sent again: the intent reports it and changes nothing.
        let late = try store.recordIntent(
            sessionID: "S", stepKey: "session", idempotencyKey: "k1", requestFingerprint: "f2",
            contentDigest: "d2", bundleName: "other", now: now)
        #expect(
            late == .alreadyDone(CompletedStep(serverID: 41, contentDigest: "d1", doneAt: now.addingTimeInterval(6))))
        let steps = try store.steps(sessionID: "S")
        #expect(steps.count == 1)
        #expect(steps.first?.state == .done)
        #expect(steps.first?.requestFingerprint == "f1")
        #expect(steps.first?.bundleName == "b.tar.gz")
    }

    @Test func intentsRecordedAheadInOneCommitEachTakeTheirResultLater() throws {
        let store = try open()
        try store.recordIntent(
            sessionID: "S", stepKey: "dope:1", idempotencyKey: "k1", requestFingerprint: "f1", contentDigest: "d1",
            bundleName: "b")
        try store.recordResult(sessionID: "S", stepKey: "dope:1", serverID: 7)
        let intents = ["dope:1", "dope:2", "dope:3"].map {
            CheckpointStore.StepIntent(
                stepKey: $0, idempotencyKey: "k-\($0)", requestFingerprint: "f-\($0)", contentDigest: "d",
                bundleName: "b")
        }
        let outcomes = try store.recordIntents(sessionID: "S", intents)
        #expect(outcomes.count == 3)
        if case .alreadyDone(let done) = outcomes[0] {
            #expect(done.serverID == 7)
        } else {
            Issue.record("dope:1 is done: \(outcomes[0])")
        }
        #expect(outcomes[1...].allSatisfy { $0 == .recorded })
        // Recorded, not done: each result comes after its own answer.
        #expect(try store.completedSteps(sessionID: "S").keys.sorted() == ["dope:1"])
        try store.recordResult(sessionID: "S", stepKey: "dope:2", serverID: 8)
        #expect(try store.completedSteps(sessionID: "S")["dope:2"]?.serverID == 8)
        #expect(try store.steps(sessionID: "S").map(\.state) == [.done, .done, .sent])
    }

    @Test func conflictingOrMissingResultsAreErrors() throws {
        let store = try open()
        let noIntent = #expect(throws: CheckpointError.self) {
            try store.recordResult(sessionID: "S", stepKey: "dope:1", serverID: 1)
        }
        #expect(noIntent?.code == .noIntent)

        try store.recordIntent(
            sessionID: "S", stepKey: "dope:1", idempotencyKey: "k", requestFingerprint: "f", contentDigest: "d",
            bundleName: "b")
        try store.recordResult(sessionID: "S", stepKey: "dope:1", serverID: 7)
        let conflict = #expect(throws: CheckpointError.self) {
            try store.recordResult(sessionID: "S", stepKey: "dope:1", serverID: 8)
        }
        #expect(conflict?.code == .conflictingResult)
        #expect(try store.completedSteps(sessionID: "S")["dope:1"]?.serverID == 7)
    }

    @Test func completedStepsCarryTheDigestThatRevealsAChangedRecord() throws {
        let store = try open()
        for (key, digest) in [("session", "aa"), ("dope:1", "bb"), ("dope:2", "cc")] {
            try store.recordIntent(
                sessionID: "S", stepKey: key, idempotencyKey: "k-\(key)", requestFingerprint: "f",
                contentDigest: digest, bundleName: "one")
        }
        try store.recordResult(sessionID: "S", stepKey: "session", serverID: 1)
        try store.recordResult(sessionID: "S", stepKey: "dope:1", serverID: 2)
        // dope:2 was sent but never answered: not completed.

        // A later bundle of the same session: dope:1 changed, dope:3 is new.
        let later = ["session": "aa", "dope:1": "XX", "dope:2": "cc", "dope:3": "dd"]
        let completed = try store.completedSteps(sessionID: "S")
        let changed = later.filter { key, digest in completed[key].map { $0.contentDigest != digest } ?? false }.keys
        let toSend = later.keys.filter { completed[$0] == nil }.sorted()
        #expect(Array(changed) == ["dope:1"])
        #expect(toSend == ["dope:2", "dope:3"])
        #expect(try store.completedSteps(sessionID: "other").isEmpty)
    }

    // MARK: Bundles

    /// First seen under a clock a year ahead, then deferred once the clock is right (synchronized):
    /// the 6-day max age counts from that deferral, not from a year on, so it can still end the
    /// deferrals. Under a clock not synchronized, which may be the one behind, the time stands.
    @Test func aFirstSeenTimeAheadOfTheClockCountsFromTheDeferral() throws {
        let (store, unsynchronized) = (
            try open(clock: .fixed(synchronized: true)), try open(clock: .fixed(synchronized: false))
        )
        let policy = DeferralPolicy(maxAttempts: nil, maxAge: .seconds(6 * 86_400))
        let error = BundleFailure(reason: .http(503))
        let owner = ClaimOwner(host: "h", pid: 9, runID: "r")
        let aYearOn = now.addingTimeInterval(365 * 86_400)
        func deferral(_ name: String, at time: Date, synchronized: Bool = true) throws -> Deferral {
            try (synchronized ? store : unsynchronized).recordDeferral(
                name: name, sessionID: nil, error: error, now: time, policy: policy)
        }
        try store.recordClaim(name: "b", owner: owner, now: aYearOn)
        let first = try deferral("b", at: now)
        #expect(first.firstSeen == now && !first.exhausted)
        #expect(try deferral("b", at: now.addingTimeInterval(7 * 86_400)).exhausted)
        // Within the tolerance (another host's clock a little ahead), the time stands.
        try store.recordClaim(name: "c", owner: owner, now: now.addingTimeInterval(60))
        #expect(try deferral("c", at: now).firstSeen == now.addingTimeInterval(60))
        // Not synchronized: the time stands too.
        try store.recordClaim(name: "d", owner: owner, now: aYearOn)
        #expect(try deferral("d", at: now, synchronized: false).firstSeen == aYearOn)
    }

    @Test func deferralsCountAttemptsGrowTheDelayAndEndTheClaim() throws {
        let store = try open(clock: .fixed(synchronized: false))
        let policy = DeferralPolicy(base: .seconds(60), factor: 2, cap: .seconds(150), maxAttempts: 3, maxAge: nil)
        let error = BundleFailure(reason: .http(503), step: "dope:2", httpStatus: 503, message: "busy\nretry later")
        try store.recordClaim(name: "b", owner: ClaimOwner(host: "h", pid: 9, runID: "r"), now: now)
        #expect(try store.claims().map(\.bundleName) == ["b"])

        let first = try store.recordDeferral(
            name: "b", sessionID: "S", error: error, now: now, policy: policy)
        #expect(
            first
                == Deferral(
                    attempts: 1, nextAttemptAt: now.addingTimeInterval(60), firstSeen: now, age: 0, exhausted: false))
        #expect(try store.claims().isEmpty)

        let later = now.addingTimeInterval(100)
        try store.recordClaim(name: "b", owner: ClaimOwner(host: "h", pid: 10, runID: "r2"), now: later)
        let second = try store.recordDeferral(
            name: "b", sessionID: nil, error: error, now: later, policy: policy)
        #expect(
            second
                == Deferral(
                    attempts: 2, nextAttemptAt: later.addingTimeInterval(120), firstSeen: now, age: 100,
                    exhausted: false))
        let third = try store.recordDeferral(name: "b", sessionID: nil, error: error, now: later, policy: policy)
        #expect(third.nextAttemptAt == later.addingTimeInterval(150))
        #expect(third.exhausted)

        let state = try #require(try store.bundleState(name: "b"))
        #expect(state.attempts == 3)
        #expect(state.sessionID == "S")
        #expect(state.lastError == error)
        #expect(state.lastOutcome == .deferred)
        #expect(state.nextAttemptAt == later.addingTimeInterval(150))
        #expect(try store.bundles(withOutcome: .deferred).map(\.name) == ["b"])

        try store.recordFailure(
            name: "b", sessionID: nil, error: BundleFailure(reason: FailureReason(rawValue: "max_attempts")), now: later
        )
        #expect(try store.bundleState(name: "b")?.lastOutcome == .failed)
        #expect(try store.bundleState(name: "b")?.nextAttemptAt == nil)

        // requeue: a fresh count and a fresh age clock; checkpoints untouched.
        #expect(try store.resetAttempts(name: "b", now: later.addingTimeInterval(1)))
        let requeued = try #require(try store.bundleState(name: "b"))
        #expect(requeued.attempts == 0)
        #expect(requeued.firstSeen == later.addingTimeInterval(1))
        #expect(requeued.lastOutcome == .requeued)
        #expect(try store.resetAttempts(name: "unknown") == false)
    }

    @Test func givingBackUncountedKeepsTheAttempts() throws {
        let store = try open()
        try store.recordClaim(name: "b", owner: ClaimOwner(host: "h", pid: 1, runID: "r"), now: now)
        _ = try store.recordDeferral(name: "b", sessionID: nil, error: BundleFailure(reason: .unreachable), now: now)
        try store.recordClaim(name: "b", owner: ClaimOwner(host: "h", pid: 1, runID: "r2"), now: now)
        try store.recordReturned(name: "b", now: now)
        #expect(try store.bundleState(name: "b")?.attempts == 1)
        #expect(try store.bundleState(name: "b")?.lastOutcome == .returned)
        #expect(try store.claims().isEmpty)
    }

    @Test func aClaimRecordsTheSessionAndStepCountOfThePlanInOneGo() throws {
        let store = try open()
        let owner = ClaimOwner(host: "h", pid: 1, runID: "r")
        try store.recordClaim(name: "b", sessionID: "S", owner: owner, totalSteps: 12, now: now)
        let state = try #require(try store.bundleState(name: "b"))
        #expect(state.sessionID == "S" && state.stepsTotal == 12)
        // Taken back by a later run before it planned: what is known is kept.
        _ = try store.recordReturned(name: "b", now: now)
        try store.recordClaim(name: "b", owner: owner, now: now.addingTimeInterval(5))
        let again = try #require(try store.bundleState(name: "b"))
        #expect(again.sessionID == "S" && again.stepsTotal == 12)
    }

    @Test func aNewBundleReusingADoneBundlesNameStartsFresh() throws {
        let store = try open()
        let owner = ClaimOwner(host: "h", pid: 1, runID: "r")
        try store.recordClaim(name: "b", sessionID: "OLD", owner: owner, now: now)
        _ = try store.recordDeferral(
            name: "b", sessionID: nil, error: BundleFailure(reason: FailureReason(rawValue: "x")), now: now)
        try store.recordDone(name: "b", sessionID: nil, now: now)
        try store.recordClaim(name: "b", sessionID: "NEW", owner: owner, now: now.addingTimeInterval(10))
        let state = try #require(try store.bundleState(name: "b"))
        #expect(state.attempts == 0)
        #expect(state.sessionID == "NEW")
        #expect(state.firstSeen == now.addingTimeInterval(10))
    }

    @Test func forgetDeletesDoneRowsAndStepsNoOtherBundleNeeds() throws {
        let store = try open()
        let owner = ClaimOwner(host: "h", pid: 1, runID: "r")
        func finish(_ name: String, session: String) throws {
            try store.recordClaim(name: name, sessionID: session, owner: owner)
            try store.recordIntent(
                sessionID: session, stepKey: "session", idempotencyKey: "k", requestFingerprint: "f",
                contentDigest: "d", bundleName: name)
            try store.recordResult(sessionID: session, stepKey: "session", serverID: 1)
            try store.recordDone(name: name, sessionID: session)
        }
        try finish("a1", session: "A")
        try finish("a2", session: "A")
        try finish("b1", session: "B")
        try store.recordClaim(name: "busy", sessionID: "C", owner: owner)

        #expect(try store.forget(names: ["a1", "b1", "busy", "never-heard-of"]) == 2)
        #expect(try store.bundleState(name: "a1") == nil)
        #expect(try store.bundleState(name: "busy") != nil)  // not done: kept
        #expect(try store.completedSteps(sessionID: "A").count == 1)  // a2 still names session A
        #expect(try store.completedSteps(sessionID: "B").isEmpty)
        #expect(try store.claims().map(\.bundleName) == ["busy"])
    }

    @Test func renamedMovesRowClaimAndSteps() throws {
        let store = try open()
        try store.recordClaim(
            name: "b.tar.gz", sessionID: "S", owner: ClaimOwner(host: "h", pid: 1, runID: "r"), now: now)
        try store.recordIntent(
            sessionID: "S", stepKey: "session", idempotencyKey: "k", requestFingerprint: "f", contentDigest: "d",
            bundleName: "b.tar.gz")
        try store.renamed(from: "b.tar.gz", to: "b.1.tar.gz", keepingALiveRow: true)
        #expect(try store.bundleState(name: "b.tar.gz") == nil)
        #expect(try store.bundleState(name: "b.1.tar.gz")?.sessionID == "S")
        #expect(try store.claims().map(\.bundleName) == ["b.1.tar.gz"])
        #expect(try store.steps(sessionID: "S").first?.bundleName == "b.1.tar.gz")
        // The result now counts toward the renamed bundle.
        try store.recordResult(sessionID: "S", stepKey: "session", serverID: 3)
        #expect(try store.bundleState(name: "b.1.tar.gz")?.stepsDone == 1)
    }

    @Test(
        "SQLite: a rename never replaces a live bundle's row: incoming/a.1.tar.gz, waiting for retry, keeps its attempts when another a.tar.gz takes that name in done/"
    )
    func renamedKeepsALiveRow() throws {
        let store = try open()
        let owner = ClaimOwner(host: "h", pid: 1, runID: "r")
        // The first copy, deferred and given back as a.1.tar.gz (incoming/a.tar.gz was taken).
        try store.recordClaim(name: "a.tar.gz", sessionID: "S1", owner: owner, now: now)
        _ = try store.recordDeferral(
            name: "a.tar.gz", sessionID: "S1", error: BundleFailure(reason: .http(503)), now: now)
        try store.renamed(from: "a.tar.gz", to: "a.1.tar.gz", keepingALiveRow: false)
        // The second copy is done, and done/a.tar.gz being taken, becomes done/a.1.tar.gz.
        try store.recordClaim(name: "a.tar.gz", sessionID: "S2", owner: owner, now: now)
        try store.recordDone(name: "a.tar.gz", sessionID: "S2", now: now)
        try store.renamed(from: "a.tar.gz", to: "a.1.tar.gz", keepingALiveRow: true)
        let waiting = try #require(try store.bundleState(name: "a.1.tar.gz"))
        #expect(waiting.sessionID == "S1" && waiting.attempts == 1, "\(waiting)")
        #expect(try store.bundleState(name: "a.tar.gz")?.sessionID == "S2", "the done row keeps its old name")
    }

    @Test(
        "a bundle given back under a suffix takes that name's row: its attempts never pass to the new file that took its old name"
    )
    func aGiveBackTakesItsNewNamesRow() throws {
        let store = try open()
        let owner = ClaimOwner(host: "h", pid: 1, runID: "r")
        // x.1.tar.gz is claimed now; x.tar.gz is deferred and goes back as incoming/x.1.tar.gz,
        // since a new file took incoming/x.tar.gz.
        try store.recordClaim(name: "x.1.tar.gz", sessionID: "S1", owner: owner, now: now)
        try store.recordClaim(name: "x.tar.gz", sessionID: "S2", owner: owner, now: now)
        _ = try store.recordDeferral(
            name: "x.tar.gz", sessionID: "S2", error: BundleFailure(reason: .http(503)), now: now)
        try store.renamed(from: "x.tar.gz", to: "x.1.tar.gz", keepingALiveRow: false)
        #expect(try store.bundleState(name: "x.tar.gz") == nil, "nothing for the new file to inherit")
        #expect(try store.bundleState(name: "x.1.tar.gz")?.attempts == 1)
    }

    // MARK: Runs

    @Test func runsAndTheLastSummary() throws {
        let store = try open()
        #expect(try store.lastRun() == nil)
        try store.recordRunStarted(runID: "r1", host: "h", pid: 5, startedAt: now)
        let summary = RunSummary(
            claimed: 3, done: 1, deferred: 1, failed: 1, requests: 40, bytes: 1 << 33, seconds: 2.5, exitCode: 1)
        try store.recordRunFinished(runID: "r1", summary: summary, finishedAt: now.addingTimeInterval(3))
        try store.recordRunStarted(runID: "r2", host: "h", pid: 6, startedAt: now.addingTimeInterval(60))
        let last = try #require(try store.lastRun())
        #expect(last.runID == "r2")
        #expect(last.finishedAt == nil)
        let finished = try #require(try store.lastFinishedRun())
        #expect(finished.runID == "r1")
        #expect(finished.summary == summary)
        #expect(finished.finishedAt == now.addingTimeInterval(3))
        let missing = #expect(throws: CheckpointError.self) {
            try store.recordRunFinished(runID: "nope", summary: summary)
        }
        #expect(missing?.code == .database)
    }
}

@Suite struct CheckpointErrorMappingTests {
    @Test(arguments: [
        (SQLiteResultCode.full, CheckpointError.Code.diskFull),
        (.busy, .busy),
        (SQLiteResultCode(rawValue: 5 | (2 << 8)), .busy),  // SQLITE_BUSY_SNAPSHOT: an extended code
        (.corrupt, .corrupt),
        (.notADatabase, .corrupt),
        (.readOnly, .readOnly),
        (.ioError, .ioError),
        (.cantOpen, .cannotOpen),
        (.constraint, .database),
    ])
    func sqliteFailuresGetCodes(sqlite: SQLiteResultCode, expected: CheckpointError.Code) {
        let error = CheckpointError.from(
            SQLiteError(code: sqlite, message: "m"), path: "/spool/dopesync.sqlite", doing: "x")
        #expect(error.code == expected)
        #expect(error.message.contains("/spool/dopesync.sqlite"))
        #expect(error.cause?.code == sqlite)
    }

    @Test func diskFullSaysWhatToDo() {
        let error = CheckpointError.from(
            SQLiteError(code: .full, message: "database or disk is full"), path: "/s/db", doing: "x")
        #expect(error.description.contains("full"))
        #expect(error.description.contains("[disk_full]"))
    }
}
