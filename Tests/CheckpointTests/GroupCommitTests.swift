import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// When step results commit, and who hears of it: the rules on their own (no database, no
/// threads; a waiter is a number), then the same over a real checkpoint database.
@Suite struct GroupCommitTests {
    typealias State = GroupCommitState<Int>

    static func result(_ session: String, _ step: String = "session", id: Int64 = 1) -> CheckpointStore.StepResult {
        CheckpointStore.StepResult(sessionID: session, stepKey: step, serverID: id)
    }

    /// The batch a submit asks to commit, if any.
    static func batch(_ action: State.SubmitAction) -> State.Batch? {
        if case .commit(let batch) = action { return batch }
        return nil
    }

    @Test("a full batch (one result from each bundle in flight) commits in the background, before anybody waits")
    func fullBatchCommitsInTheBackground() {
        var state = State(batchSize: 3)
        let (a, first) = state.submit(Self.result("A"))
        let (b, second) = state.submit(Self.result("B"))
        #expect(first == .startTimer, "the first result to wait starts the timer that bounds its wait")
        #expect(second == .none, "results wait for the others; one timer is enough")
        let (c, action) = state.submit(Self.result("C"))
        let batch = Self.batch(action)
        #expect(batch?.tickets == [a, b, c])
        #expect(batch?.results.map(\.sessionID) == ["A", "B", "C"])
        #expect(state.isCommitting && state.waitingCount == 0)

        // B's bundle needs its result while the batch commits: it waits for the commit under way.
        guard case .wait = state.settle(b, waiter: 20) else {
            Issue.record("B should wait for the commit under way")
            return
        }
        let (resume, next) = state.committed(batch!, outcomes: [nil, nil, nil])
        #expect(resume.map(\.0) == [20], "only B was waiting")
        #expect(next == nil, "nothing else is due")
        // A and C settle later and learn at once that theirs are committed.
        guard case .resume(nil) = state.settle(a, waiter: 10), case .resume(nil) = state.settle(c, waiter: 30) else {
            Issue.record("A and C are committed")
            return
        }
    }

    @Test("a bundle that needs a result still waiting commits everything waiting at once, on its own time")
    func settlingCommitsWhatWaits() {
        var state = State(batchSize: 4)
        let (a, _) = state.submit(Self.result("A"))
        let (b, _) = state.submit(Self.result("B"))
        guard case .commit(let batch) = state.settle(a, waiter: 10) else {
            Issue.record("A's settle should commit")
            return
        }
        #expect(batch.tickets == [a, b], "B's result rides along")
        let (resume, next) = state.committed(batch, outcomes: [nil, nil])
        #expect(resume.map(\.0) == [10])
        #expect(next == nil)
        guard case .resume(nil) = state.settle(b, waiter: 20) else {
            Issue.record("B rode along and is committed")
            return
        }
    }

    @Test(
        "results handed in during a commit go in the next batch, which starts when the commit ends if somebody needs it"
    )
    func nextBatchStartsWhenNeeded() {
        var state = State(batchSize: 4)
        let (a, _) = state.submit(Self.result("A"))
        guard case .commit(let first) = state.settle(a, waiter: 10) else {
            Issue.record("A's settle should commit")
            return
        }
        let (b, noBatch) = state.submit(Self.result("B"))
        #expect(Self.batch(noBatch) == nil)
        guard case .wait = state.settle(b, waiter: 20) else {
            Issue.record("one commit at a time: B waits")
            return
        }
        let (resumeFirst, second) = state.committed(first, outcomes: [nil])
        #expect(resumeFirst.map(\.0) == [10])
        #expect(second?.tickets == [b], "B is waiting, so its batch starts at once")
        let (resumeSecond, third) = state.committed(second!, outcomes: [nil])
        #expect(resumeSecond.map(\.0) == [20])
        #expect(third == nil)
    }

    @Test("results handed in during a commit that nobody needs yet wait for a full batch")
    func unneededResultsWait() {
        var state = State(batchSize: 3)
        let (a, _) = state.submit(Self.result("A"))
        guard case .commit(let first) = state.settle(a, waiter: 10) else {
            Issue.record("A's settle should commit")
            return
        }
        _ = state.submit(Self.result("B"))
        let (_, next) = state.committed(first, outcomes: [nil])
        #expect(next == nil)
        #expect(state.waitingCount == 1 && !state.isCommitting)
    }

    @Test("each waiter hears its own result's outcome: one refused result does not fail the others")
    func outcomesGoToTheirOwnWaiters() {
        var state = State(batchSize: 2)
        let (a, _) = state.submit(Self.result("A"))
        let (b, action) = state.submit(Self.result("B"))
        _ = state.settle(a, waiter: 10)
        _ = state.settle(b, waiter: 20)
        let conflict = CheckpointError(code: .conflictingResult, message: "B was done with another id")
        let (resume, _) = state.committed(Self.batch(action)!, outcomes: [nil, conflict])
        #expect(resume.count == 2)
        #expect(resume.first { $0.0 == 10 }?.1 == nil)
        #expect(resume.first { $0.0 == 20 }?.1?.code == .conflictingResult)
    }

    @Test("a result nobody needs yet commits when the maximum delay is up, even if the batch never fills")
    func timerBoundsTheWait() {
        var state = State(batchSize: 4)
        let (a, action) = state.submit(Self.result("A"))
        #expect(action == .startTimer)
        let (b, _) = state.submit(Self.result("B"))
        let batch = state.timerFired()
        #expect(batch?.tickets == [a, b], "everything waiting commits, not only the result that started the timer")
        let (_, next) = state.committed(batch!, outcomes: [nil, nil])
        #expect(next == nil)
        let (_, again) = state.submit(Self.result("C"))
        #expect(again == .startTimer, "the next result to wait starts a new timer")
    }

    @Test("the timer firing during a commit makes the next batch start as soon as that commit ends")
    func timerDuringACommit() {
        var state = State(batchSize: 2)
        _ = state.submit(Self.result("A"))
        let (_, full) = state.submit(Self.result("B"))
        let first = Self.batch(full)!
        let (c, _) = state.submit(Self.result("C"))
        #expect(state.timerFired() == nil, "one commit at a time")
        let (_, next) = state.committed(first, outcomes: [nil, nil])
        #expect(next?.tickets == [c], "C has waited its maximum: it does not wait for a full batch")
    }

    @Test("a batch that fills during a commit starts as soon as that commit ends")
    func batchFilledDuringACommit() {
        var state = State(batchSize: 2)
        let (a, _) = state.submit(Self.result("A"))
        guard case .commit(let first) = state.settle(a, waiter: 10) else {
            Issue.record("A's settle should commit")
            return
        }
        let (b, _) = state.submit(Self.result("B"))
        let (c, filled) = state.submit(Self.result("C"))
        #expect(Self.batch(filled) == nil, "one commit at a time")
        let (_, next) = state.committed(first, outcomes: [nil])
        #expect(next?.tickets == [b, c])
    }

    // MARK: Over a real database

    static let sessions = (0..<4).map { "S\($0)" }
    static let steps = (0..<25).map { "dope:\($0)" }

    /// A checkpoint database in `folder` where four sessions have the intents of 25 steps each.
    static func storeWithIntents(in folder: TemporaryFolder) throws -> (
        CheckpointStore, sessions: [String], steps: [String]
    ) {
        let store = try CheckpointStore(path: folder.sub("dopesync.sqlite"))
        for session in sessions {
            try store.recordIntents(
                sessionID: session,
                steps.map {
                    CheckpointStore.StepIntent(
                        stepKey: $0, idempotencyKey: "\(session)-\($0)", requestFingerprint: "f", contentDigest: "d",
                        bundleName: "\(session).tar.gz")
                })
        }
        return (store, sessions, steps)
    }

    @Test(
        "four bundles handing in and settling results concurrently: every result is recorded, in shared transactions; a refused one is reported to its own bundle",
        .timeLimit(minutes: 3))
    func concurrentBundlesOverARealDatabase() async throws {
        let folder = try TemporaryFolder("group-commit")
        let (store, sessions, steps) = try Self.storeWithIntents(in: folder)
        // S3's last step is already done with another server id: recording it again is a conflict.
        try store.recordResult(sessionID: "S3", stepKey: "dope:24", serverID: 999)

        let errors = await CheckpointWriter.with(store) { writer in
            await GroupCommit.with(storage: writer, batchSize: sessions.count) { commits in
                await Self.settleConcurrently(commits, sessions: sessions, steps: steps)
            }
        }
        #expect(errors == ["S3: conflicting_result"])
        for session in sessions {
            let done = try store.completedSteps(sessionID: session)
            #expect(done.count == steps.count, "\(session)")
            #expect(done["dope:0"]?.serverID == 1)
        }
        #expect(
            try store.completedSteps(sessionID: "S3")["dope:24"]?.serverID == 999,
            "the conflicting result changed nothing")
        #expect(try store.completedSteps(sessionID: "S2")["dope:24"]?.serverID == 25)
    }

    /// Like uploaders: each session settles its previous result before handing in the next. Returns the errors settled.
    static func settleConcurrently(_ commits: GroupCommit, sessions: [String], steps: [String]) async -> [String] {
        let errors = await withTaskGroup(of: [String].self) { group in
            for session in sessions {
                group.addTask {
                    // Like an uploader: settle the previous result before handing in the next.
                    var errors: [String] = []
                    var previous: GroupCommit.Ticket?
                    for (index, step) in steps.enumerated() {
                        if let previous, let error = await commits.settle(previous) {
                            errors.append("\(session): \(error.code)")
                        }
                        previous = commits.submit(
                            CheckpointStore.StepResult(sessionID: session, stepKey: step, serverID: Int64(index + 1)))
                    }
                    if let previous, let error = await commits.settle(previous) {
                        errors.append("\(session): \(error.code)")
                    }
                    return errors
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        #expect(
            commits.committed.results == sessions.count * steps.count,
            "every result went through a transaction (the refused one changed nothing in it)")
        return errors
    }

    @Test(
        "one result from each of four bundles a round: one transaction a round, not one a result",
        .timeLimit(minutes: 3))
    func roundsShareATransaction() async throws {
        let folder = try TemporaryFolder("group-commit-rounds")
        let (store, sessions, steps) = try Self.storeWithIntents(in: folder)
        // The timer never decides here: only full batches and settles do.
        let committed = await CheckpointWriter.with(store) { writer in
            await GroupCommit.with(storage: writer, batchSize: sessions.count, maximumDelay: .seconds(3600)) {
                commits in
                await Self.rounds(commits, sessions: sessions, steps: steps)
            }
        }
        #expect(committed == (transactions: steps.count, results: sessions.count * steps.count))
        for session in sessions { #expect(try store.completedSteps(sessionID: session).count == steps.count) }
    }

    static func rounds(_ commits: GroupCommit, sessions: [String], steps: [String]) async -> (
        transactions: Int, results: Int
    ) {
        var previous: [GroupCommit.Ticket] = []
        for (index, step) in steps.enumerated() {
            // Like uploaders whose answers arrive together: each settles its last result, hands in the next.
            for ticket in previous { #expect(await commits.settle(ticket) == nil) }
            previous = sessions.map {
                commits.submit(CheckpointStore.StepResult(sessionID: $0, stepKey: step, serverID: Int64(index + 1)))
            }
        }
        for ticket in previous { #expect(await commits.settle(ticket) == nil) }
        return commits.committed
    }

    /// A store whose session `S` has the intent of its step `session`, and nothing done.
    static func storeWithOneIntent(in folder: TemporaryFolder) throws -> CheckpointStore {
        let store = try CheckpointStore(path: folder.sub("dopesync.sqlite"))
        try store.recordIntent(
            sessionID: "S", stepKey: "session", idempotencyKey: "k", requestFingerprint: "f", contentDigest: "d",
            bundleName: "S.tar.gz")
        return store
    }

    @Test("a lone result that nobody settles and no batch fills is committed by the timer", .timeLimit(minutes: 3))
    func loneResultCommitsWithinTheMaximumDelay() async throws {
        let folder = try TemporaryFolder("group-commit-lone")
        let store = try Self.storeWithOneIntent(in: folder)
        let (transactions, committed) = AsyncStream.makeStream(of: Int.self)
        await CheckpointWriter.with(store) { writer in
            await GroupCommit.with(storage: writer, batchSize: 4, maximumDelay: .milliseconds(1)) {
                committed.yield($0)
            } _: { commits in
                await Self.loneResult(commits, transactions: transactions)
            }
        }
        #expect(try store.completedSteps(sessionID: "S")["session"]?.serverID == 7)
    }

    static func loneResult(_ commits: GroupCommit, transactions: AsyncStream<Int>) async {
        let ticket = commits.submit(CheckpointStore.StepResult(sessionID: "S", stepKey: "session", serverID: 7))
        // Nobody settles and the batch never fills: only the timer can commit it.
        var iterator = transactions.makeAsyncIterator()
        // How soon is the timer's business (10 ms in a run); that it comes at all is what counts,
        // within the test's time limit, however loaded the machine (ASan, the suite in parallel).
        #expect(await iterator.next() == 1, "one transaction, of the one result")
        #expect(await commits.settle(ticket) == nil, "settling afterwards learns it is committed")
    }

    @Test(
        "when its scope ends, a result still waiting commits at once: no timer outlives the run",
        .timeLimit(minutes: 3))
    func scopeEndCommitsWhatWaits() async throws {
        let folder = try TemporaryFolder("group-commit-scope")
        let store = try Self.storeWithOneIntent(in: folder)
        await CheckpointWriter.with(store) { writer in
            // A timer of an hour: only the end of the scope can commit the result within the
            // test's time limit.
            await GroupCommit.with(storage: writer, batchSize: 4, maximumDelay: .seconds(3600)) { commits in
                _ = commits.submit(CheckpointStore.StepResult(sessionID: "S", stepKey: "session", serverID: 7))
            }
        }
        #expect(try store.completedSteps(sessionID: "S")["session"]?.serverID == 7)
    }
}
