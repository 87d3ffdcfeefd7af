import DopeSync
import DopeSyncTestSupport
import Foundation
import Synchronization
import Testing

/// Claims as leases in a real PostgreSQL server, two workers' stores side by side in one process:
/// a lease another worker holds is not taken, an expired one is, and the worker it was taken from
/// writes nothing after.
@Suite struct LeaseFenceTests {
    /// The whole suite shares two cores: a statement may wait its turn far longer than in a run.
    static let patience = Duration.seconds(120)
    let ownerA = ClaimOwner(host: "host-a", pid: 1, runID: "run-a")
    let ownerB = ClaimOwner(host: "host-b", pid: 2, runID: "run-b")

    /// A worker's store on `database`, as `owner`, for the length of `body`.
    func worker(
        _ owner: ClaimOwner, on database: SharedDatabase, lease: Duration = .seconds(30),
        _ body: (PostgresCheckpoints) async throws -> Void
    ) async throws {
        try await PostgresCheckpoints.with(
            database.settings(lease: lease), owner: owner, statementTimeout: Self.patience, logger: quietLogger, body)
    }

    func intent(_ key: String, bundle: String = "x.tar.gz") -> CheckpointStore.StepIntent {
        CheckpointStore.StepIntent(
            stepKey: key, idempotencyKey: "key-\(key)", requestFingerprint: "f-\(key)", contentDigest: "d-\(key)",
            bundleName: bundle)
    }

    @Test(
        "a session's hold: busy while another bundle holding it has a live claim, free once that claim ends; a row an earlier attempt left naming the session holds nothing"
    )
    func aSessionIsHeldByALiveClaimOnly() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await withTemporarySpool { spool, _ in
            for name in ["a.tar.gz", "b.tar.gz"] {
                #expect(FileManager.default.createFile(atPath: spool.path(.incoming, name), contents: Data(name.utf8)))
            }
            let entries = try await spool.list(.incoming).sorted { $0.name < $1.name }
            let (bundleA, bundleB) = await (
                try #require(try spool.claim(entries[0])), try #require(try spool.claim(entries[1]))
            )
            try await worker(ownerA, on: database) { a in
                try await worker(ownerB, on: database) { b in
                    #expect(try await a.acquireClaim(of: "a.tar.gz", orphan: false, owner: ownerA))
                    #expect(try await b.acquireClaim(of: "b.tar.gz", orphan: false, owner: ownerB))
                    _ = try await a.beginReading(name: "a.tar.gz", now: Date())
                    _ = try await b.beginReading(name: "b.tar.gz", now: Date())
                    // B's row names the session from an earlier attempt, deferred: it holds nothing.
                    try await database.psql(
                        "UPDATE dopesync.bundles SET session_id = 's1', last_outcome = 'deferred' WHERE name = 'b.tar.gz'"
                    )
                    guard case .held = await a.holdSession("s1", of: bundleA) else {
                        Issue.record("a stale row kept the session from A")
                        return
                    }
                    // Holding the session ends A's reading: a database failing before A's next record
                    // must not leave it to count as a reading cut short (3 make reader_crashed).
                    #expect(
                        try await database.psql(
                            "SELECT reading_since IS NULL FROM dopesync.bundles WHERE name = 'a.tar.gz'") == "t")
                    guard case .busy = await b.holdSession("s1", of: bundleB) else {
                        Issue.record("B took the session A holds")
                        return
                    }
                    // A's claim ends (its bundle moved, or it let it go): B may hold the session.
                    await a.releaseClaim(of: "a.tar.gz")
                    guard case .held = await b.holdSession("s1", of: bundleB) else {
                        Issue.record("A's ended claim still held the session")
                        return
                    }
                }
            }
        }
    }

    @Test func aHeldClaimIsNotTakenAndAnExpiredOneIsWithTheNextEpoch() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await worker(ownerA, on: database) { a in
            try await worker(ownerB, on: database) { b in
                #expect(try await a.acquireClaim(of: "x.tar.gz", orphan: false, owner: ownerA))
                #expect(try await !b.acquireClaim(of: "x.tar.gz", orphan: false, owner: ownerB))
                #expect(try await !b.acquireClaim(of: "x.tar.gz", orphan: true, owner: ownerB))
                #expect(try await database.psql("SELECT epoch, host FROM dopesync.claims") == "1|host-a")

                // A's lease runs out in the database, as when A is paused or cut off past it.
                try await database.psql("UPDATE dopesync.claims SET lease_expires_at = 0")
                #expect(try await b.acquireClaim(of: "x.tar.gz", orphan: true, owner: ownerB))
                #expect(try await database.psql("SELECT epoch, host FROM dopesync.claims") == "2|host-b")
            }
        }
    }

    @Test func aWorkerWhoseClaimWasTakenOverWritesNothingAndMayNotMoveTheBundle() async throws {
        let database = try await SharedCluster.freshDatabase()
        // A lease no renewal falls within: a renewal after the takeover would end A's claim on its
        // own (under a sanitizer's load the steps below took seconds), and the fence is the point.
        try await worker(ownerA, on: database, lease: .seconds(3600)) { a in
            try await worker(ownerB, on: database) { b in
                #expect(try await a.acquireClaim(of: "x.tar.gz", orphan: false, owner: ownerA))
                _ = try await a.recordIntents(sessionID: "s1", [intent("session")])
                try await database.psql("UPDATE dopesync.claims SET lease_expires_at = 0")
                #expect(try await b.acquireClaim(of: "x.tar.gz", orphan: true, owner: ownerB))

                // A's own clock still gives it time; the database's fence refuses it all the same.
                #expect(a.holdsClaim(of: "x.tar.gz"))
                await #expect {
                    try await a.recordIntents(sessionID: "s1", [intent("dope:1")])
                } throws: { ($0 as? CheckpointError)?.code == .leaseLost }
                #expect(!a.holdsClaim(of: "x.tar.gz"), "a refused write ends the worker's claim at once")
                #expect(await !a.confirmClaim(of: "x.tar.gz"))
                await #expect {
                    try await a.recordDone(name: "x.tar.gz", sessionID: "s1", finalName: "x.tar.gz")
                } throws: { ($0 as? CheckpointError)?.code == .leaseLost }
                #expect(try await database.psql("SELECT step_key FROM dopesync.steps ORDER BY step_key") == "session")
                #expect(
                    try await database.psql("SELECT count(*) FROM dopesync.bundles WHERE last_outcome = 'done'") == "0")

                // B, which holds it now, writes and moves.
                _ = try await b.recordIntents(sessionID: "s1", [intent("dope:1")])
                #expect(await b.confirmClaim(of: "x.tar.gz"))
                try await b.recordDone(name: "x.tar.gz", sessionID: "s1", finalName: "x.tar.gz")
                #expect(
                    try await database.psql("SELECT step_key FROM dopesync.steps ORDER BY step_key")
                        == "dope:1\nsession")
                #expect(try await database.psql("SELECT run_id IS NULL FROM dopesync.claims") == "t")
            }
        }
    }

    @Test(
        "PostgreSQL: a rename never replaces a live bundle's row: incoming/a.1.tar.gz, waiting for retry, keeps its attempts when another a.tar.gz takes that name in done/"
    )
    func aRenameKeepsALiveRow() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await worker(ownerA, on: database) { a in
            func claim(_ sessionID: String) async throws {
                #expect(try await a.acquireClaim(of: "a.tar.gz", orphan: false, owner: ownerA))
                _ = try await a.recordClaim(
                    name: "a.tar.gz", sessionID: sessionID, owner: ownerA, producer: Producer(uid: 0),
                    api: "http://api:80", totalSteps: 2, now: Date())
            }
            // The first copy, deferred and given back as a.1.tar.gz (incoming/a.tar.gz was taken).
            try await claim("s1")
            _ = try await a.recordDeferral(
                name: "a.tar.gz", sessionID: "s1", error: BundleFailure(reason: .http(503)), policy: DeferralPolicy())
            try await a.recordGivenBack(name: "a.tar.gz", finalName: "a.1.tar.gz", counted: true)
            // The second copy is done, and done/a.tar.gz being taken, becomes done/a.1.tar.gz.
            try await claim("s2")
            try await a.recordDone(name: "a.tar.gz", sessionID: "s2", finalName: "a.1.tar.gz")
            let waiting = try #require(try await a.bundleState(name: "a.1.tar.gz"))
            #expect(waiting.sessionID == "s1" && waiting.attempts == 1, "\(waiting)")
        }
    }

    @Test(
        "PostgreSQL: a bundle first seen before NTP set the clock 10 days forward is dated again by the boot's clock and deferred, not given up; seen on another boot, or under a synchronized clock, it counts by the wall clock; seen a year ahead, from the deferral"
    )
    func aFirstSightBeforeNTPIsDatedAgainByTheBootsClock() async throws {
        let database = try await SharedCluster.freshDatabase()
        let synchronized = Atomic(false)
        let clock = ClockFacts(
            isSynchronized: { synchronized.load(ordering: .relaxed) }, bootInstant: { SystemClock.bootInstant })
        try await PostgresCheckpoints.with(
            database.settings(lease: .seconds(30)), owner: ownerA, statementTimeout: Self.patience, clock: clock,
            logger: quietLogger
        ) { a in
            let policy = DeferralPolicy(maxAttempts: nil)
            let names = ["this-boot.tar.gz", "other-boot.tar.gz", "seen-synchronized.tar.gz", "ahead.tar.gz"]
            for name in names {
                // The last two are first seen under a synchronized clock: no stamp.
                synchronized.store(name == "seen-synchronized.tar.gz" || name == "ahead.tar.gz", ordering: .relaxed)
                #expect(try await a.acquireClaim(of: name, orphan: false, owner: ownerA))
                _ = try await a.beginReading(name: name, now: Date())
            }
            #expect(
                try await database.psql(
                    "SELECT name FROM dopesync.bundles WHERE first_seen_boot LIKE '%@%' ORDER BY name")
                    == "other-boot.tar.gz\nthis-boot.tar.gz",
                "first sights under a clock not synchronized are stamped on the boot's clock")
            try await database.psql(
                """
                UPDATE dopesync.bundles SET first_seen = first_seen - 10 * 86400 WHERE name <> 'ahead.tar.gz';
                UPDATE dopesync.bundles SET first_seen_boot = 'another-boot@1' WHERE name = 'other-boot.tar.gz';
                UPDATE dopesync.bundles SET first_seen = first_seen + 365 * 86400 WHERE name = 'ahead.tar.gz'
                """)
            synchronized.store(true, ordering: .relaxed)
            func deferral(_ name: String) async throws -> Deferral {
                try await a.recordDeferral(
                    name: name, sessionID: nil, error: BundleFailure(reason: .http(503)), policy: policy)
            }
            let thisBoot = try await deferral("this-boot.tar.gz")
            #expect(!thisBoot.exhausted && thisBoot.age < 60, "\(thisBoot)")
            #expect(try await a.bundleState(name: "this-boot.tar.gz")?.firstSeen.timeIntervalSinceNow ?? -1e9 > -60)
            for name in ["other-boot.tar.gz", "seen-synchronized.tar.gz"] {
                let deferral = try await deferral(name)
                #expect(deferral.exhausted && deferral.age > 9 * 86_400, "\(name): \(deferral)")
            }
            // First seen a year ahead of the synchronized clock: the clock went back since; the
            // max age counts from this deferral, in the store too.
            let ahead = try await deferral("ahead.tar.gz")
            #expect(!ahead.exhausted && abs(ahead.age) < 1, "\(ahead)")
            #expect(try await a.bundleState(name: "ahead.tar.gz")?.firstSeen.timeIntervalSinceNow ?? 1e9 < 60)
            #expect(
                try await database.psql("SELECT count(*) FROM dopesync.bundles WHERE first_seen_boot IS NOT NULL")
                    == "0", "every stamp is gone once used or found useless")
        }
    }

    /// `known.tar.gz` and `imported.tar.gz` deferred by `a` and given back; `imported.tar.gz` as
    /// `migrate` leaves a bundle, its row and no claim row, so that claiming it takes the statement
    /// that makes one, and `known.tar.gz` the takeover of a free claim.
    func deferKnownAndImported(by a: PostgresCheckpoints, in database: SharedDatabase) async throws {
        for name in ["known.tar.gz", "imported.tar.gz"] {
            #expect(try await a.acquireClaim(of: name, orphan: false, owner: ownerA))
            _ = try await a.recordDeferral(
                name: name, sessionID: nil, error: BundleFailure(reason: .http(503)), policy: DeferralPolicy())
            try await a.recordGivenBack(name: name, finalName: name, counted: true)
        }
        try await database.psql("DELETE FROM dopesync.claims WHERE bundle_name = 'imported.tar.gz'")
    }

    @Test(
        "PostgreSQL: a deferral holds a bundle against both claim statements, unless it was recorded over 5 minutes ahead of the claiming clock"
    )
    func aDeferralHoldsBothClaimsUnlessRecordedAhead() async throws {
        let database = try await SharedCluster.freshDatabase()
        // Each worker in turn: a's lease book renews nothing while b claims.
        try await worker(ownerA, on: database) { a in try await deferKnownAndImported(by: a, in: database) }
        try await worker(ownerB, on: database) { b in
            for name in ["known.tar.gz", "imported.tar.gz"] {
                #expect(try await !b.acquireClaim(of: name, orphan: false, owner: ownerB), "\(name): deferred")
            }
            // Recorded a year ahead of this clock: the clock went back since.
            try await database.psql(
                "UPDATE dopesync.bundles SET updated_at = updated_at + 365 * 86400, next_attempt_at = next_attempt_at + 365 * 86400"
            )
            for name in ["known.tar.gz", "imported.tar.gz"] {
                #expect(try await b.acquireClaim(of: name, orphan: false, owner: ownerB), "\(name): due")
            }
        }
    }

    @Test(
        "PostgreSQL: a deferred bundle whose file was touched since it was given back is claimed at once, by both claim statements, as the listing says; one whose new mtime is ahead, only then"
    )
    func aTouchedDeferredBundleIsClaimed() async throws {
        let database = try await SharedCluster.freshDatabase()
        var givenBack = Date.distantPast
        try await worker(ownerA, on: database) { a in
            try await deferKnownAndImported(by: a, in: database)
            givenBack = try #require(try await a.bundleState(name: "known.tar.gz")).updatedAt
        }
        try await worker(ownerB, on: database) { b in
            for name in ["known.tar.gz", "imported.tar.gz"] {
                for (mtime, held) in [
                    (givenBack.addingTimeInterval(-60), true), (Date().addingTimeInterval(3600), true),
                ] {
                    let claimed = try await b.acquireClaim(of: name, orphan: false, modified: mtime, owner: ownerB)
                    #expect(claimed != held, "\(name), mtime \(mtime)")
                }
                // Touched just now: after the give-back, and not ahead.
                let touched = try await b.acquireClaim(of: name, orphan: false, modified: Date(), owner: ownerB)
                #expect(touched, "\(name): touched since")
            }
        }
    }

    @Test(
        "PostgreSQL: an orphan whose claim row another session locks for a moment (a dead worker's late write) is taken over once it is let go, not left for the next run"
    )
    func anOrphanLockedForAMomentIsTakenOver() async throws {
        // Another session locks the row, as a late fenced write would, until the test lets go:
        // after B's takeover has run once and skipped it.
        let (database, locker) = try await orphanWithItsRowLocked()
        try await worker(ownerB, on: database) { b in
            let taking = Task { try await b.acquireClaim(of: "x.tar.gz", orphan: true, owner: ownerB) }
            // (`pg_stat_activity` keeps a statement's first 1 KiB: its head names it.)
            try await waitUntil(database, "B's takeover tried", anotherSession(where: "query LIKE 'WITH free AS%'"))
            locker.input.write(Data("COMMIT;\n".utf8))
            #expect(try await taking.value, "skipped while locked, it waits for the next run")
        }
        try locker.input.close()
        _ = await locker.finished()
    }

    @Test(
        "PostgreSQL: an orphan whose claim row a dead worker's half-arrived transaction holds is taken over once the server ends that idle session"
    )
    func anOrphanHeldByAnIdleTransactionIsTakenOver() async throws {
        // A worker's session, as its settings make it, whose transaction locked the row and whose
        // next statement never came: the server ends it after 3 s, as it would a worker's after a
        // third of its lease (10 s for 30 s).
        let (database, dead) = try await orphanWithItsRowLocked(
            settingFirst: "SET idle_in_transaction_session_timeout = '3s';")
        try await worker(ownerB, on: database) { b in
            let asked = ContinuousClock.now
            let taken = try await b.acquireClaim(of: "x.tar.gz", orphan: true, owner: ownerB)
            #expect(taken, "given up on while the idle session held it: it waits for the next run")
            #expect(ContinuousClock.now - asked < .seconds(30))
        }
        try dead.input.close()
        _ = await dead.finished()
    }

    /// A fresh database where A's claim of `x.tar.gz` has run out, and a psql session (after
    /// `settingFirst`) in a transaction that holds its row `FOR SHARE`, fed by the test.
    func orphanWithItsRowLocked(settingFirst: String = "") async throws -> (SharedDatabase, Spawned) {
        let database = try await SharedCluster.freshDatabase()
        try await worker(ownerA, on: database, lease: .seconds(1)) { a in
            let taken = try await a.acquireClaim(of: "x.tar.gz", orphan: false, owner: ownerA)
            #expect(taken)
        }
        try await waitUntilEveryLeaseHasRunOut(database)
        let session = try await database.cluster.session(database: database.name)
        session.input.write(
            Data(
                "\(settingFirst)\nBEGIN;\nSELECT 1 FROM dopesync.claims WHERE bundle_name = 'x.tar.gz' FOR SHARE;\n"
                    .utf8))
        try await waitUntil(
            database, "the lock held",
            anotherSession(where: "state = 'idle in transaction' AND query LIKE '%FOR SHARE%'"))
        return (database, session)
    }

    @Test("PostgreSQL: prune records done times ahead of its clock as now, and only those")
    func doneTimesAheadAreRestamped() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await worker(ownerA, on: database) { a in
            for name in ["ahead.tar.gz", "past.tar.gz"] {
                #expect(try await a.acquireClaim(of: name, orphan: false, owner: ownerA))
                _ = try await a.recordClaim(
                    name: name, sessionID: name, owner: ownerA, producer: Producer(uid: 0), api: "http://api:80",
                    totalSteps: 1, now: Date())
                try await a.recordDone(name: name, sessionID: name, finalName: name)
            }
            try await database.psql(
                "UPDATE dopesync.bundles SET updated_at = updated_at + 365 * 86400 WHERE name = 'ahead.tar.gz'")
            let before = try await a.doneTimes()
            let now = Date()
            #expect(try await a.restampDoneTimes(after: WallClock.latestBelievable(at: now), to: now) == 1)
            #expect(before.count == 2)
            let after = try await a.doneTimes()
            #expect(after["ahead.tar.gz"]?.timeIntervalSince1970 == now.timeIntervalSince1970)
            #expect(after["past.tar.gz"] == before["past.tar.gz"])
        }
    }

    @Test func aResultOfAStepWhoseClaimWasTakenOverIsRefusedAndTheOthersOfItsBatchCommit() async throws {
        let database = try await SharedCluster.freshDatabase()
        try await worker(ownerA, on: database) { a in
            #expect(try await a.acquireClaim(of: "x.tar.gz", orphan: false, owner: ownerA))
            #expect(try await a.acquireClaim(of: "y.tar.gz", orphan: false, owner: ownerA))
            _ = try await a.recordClaim(
                name: "x.tar.gz", sessionID: "sx", owner: ownerA, producer: Producer(uid: 0), api: "http://api:80",
                totalSteps: 2, now: Date())
            _ = try await a.recordIntents(sessionID: "sx", [intent("session", bundle: "x.tar.gz")])
            _ = try await a.recordIntents(sessionID: "sy", [intent("session", bundle: "y.tar.gz")])
            // Another worker took y over.
            try await database.psql(
                "UPDATE dopesync.claims SET epoch = epoch + 1, run_id = 'run-b' WHERE bundle_name = 'y.tar.gz'")
            let outcomes = try await withCheckedThrowingContinuation { continuation in
                a.recordResults([
                    .init(sessionID: "sx", stepKey: "session", serverID: 11),
                    .init(sessionID: "sy", stepKey: "session", serverID: 12),
                ]) { continuation.resume(with: $0) }
            }
            #expect((try? outcomes[0].get())?.serverID == 11)
            #expect { try outcomes[1].get() } throws: { ($0 as? CheckpointError)?.code == .leaseLost }
            #expect(
                try await database.psql("SELECT session_id, state FROM dopesync.steps ORDER BY session_id")
                    == "sx|done\nsy|sent")
            // Steps done are counted from the session's steps when one bundle is read, not in lists.
            #expect(try await a.bundleState(name: "x.tar.gz")?.stepsDone == 1)
            #expect(try await a.bundlesInFlight()["x.tar.gz"].map { $0.stepsDone == nil } == true)
        }
    }

    @Test func aReadingCutShortIsCountedABundleDoneUnderTheSameNameStartsAfreshAndALostClaimMarksNothing()
        async throws
    {
        let database = try await SharedCluster.freshDatabase()
        try await worker(ownerA, on: database) { a in
            #expect(try await a.acquireClaim(of: "x.tar.gz", orphan: false, owner: ownerA))
            #expect(try await a.beginReading(name: "x.tar.gz", now: Date()) == 0)
            // The reading never ended (the process died while reading): the next one counts it.
            #expect(try await a.beginReading(name: "x.tar.gz", now: Date()) == 1)
            _ = try await a.recordClaim(
                name: "x.tar.gz", sessionID: "s1", owner: ownerA, producer: Producer(uid: 0), api: "http://api:80",
                totalSteps: 3, now: Date())
            try await a.recordDone(name: "x.tar.gz", sessionID: "s1", finalName: "x.tar.gz")

            // Another file under the same name: nothing of the first one's row is its.
            #expect(try await a.acquireClaim(of: "x.tar.gz", orphan: false, owner: ownerA))
            #expect(try await a.beginReading(name: "x.tar.gz", now: Date()) == 0)
            #expect(
                try await database.psql(
                    """
                    SELECT coalesce(session_id, '-'), attempts, coalesce(last_outcome, '-'),
                        coalesce(steps_total::text, '-'), reading_since IS NOT NULL
                    FROM dopesync.bundles
                    """) == "-|0|-|-|t")

            // Taken over: the mark is refused and the row stays as it was.
            try await database.psql("UPDATE dopesync.claims SET epoch = epoch + 1, run_id = 'run-b'")
            await #expect {
                try await a.beginReading(name: "x.tar.gz", now: Date())
            } throws: { ($0 as? CheckpointError)?.code == .leaseLost }
            #expect(try await database.psql("SELECT readings_cut_short FROM dopesync.bundles") == "0")
            #expect(!a.holdsClaim(of: "x.tar.gz"))
        }
    }

    @Test func anUnreachableDatabaseAtTheStartIsUnreachableNotAWaitForEver() async throws {
        let database = try await SharedCluster.freshDatabase()
        var settings = database.settings()
        settings.port = 1  // nothing listens there
        await #expect {
            try await PostgresCheckpoints.with(
                settings, owner: ownerA, statementTimeout: Self.patience, logger: quietLogger
            ) { _ in }
        } throws: { error in
            (error as? CheckpointError)?.code == .unreachable
        }
        settings = database.settings()
        settings.password = "wrong"
        await #expect {
            try await PostgresCheckpoints.with(
                settings, owner: ownerA, statementTimeout: Self.patience, logger: quietLogger
            ) { _ in }
        } throws: { error in
            (error as? CheckpointError)?.code == .refused
        }
    }
}
