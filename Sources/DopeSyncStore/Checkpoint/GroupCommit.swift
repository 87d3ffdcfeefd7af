import DopeSyncBundle
import DopeSyncSupport
import NIOCore
import NIOPosix
import Synchronization

/// When the results of upload steps commit: the run's group commit, as a value type that decides
/// and returns what to do. It never touches the database or a thread, so its rules are tested on
/// their own (`GroupCommitTests`); ``GroupCommit`` carries the decisions out.
///
/// Every bundle in flight hands in its steps' results (``submit(_:)``) and, before it has more
/// than ``BundleUploadState/unsettledResults`` of them outstanding and before it moves the bundle,
/// waits until the oldest is committed (``settle(_:waiter:)``). So each bundle has at most that
/// many results not yet committed, each for at most the maximum delay. Results share a transaction:
/// - once `batchSize` of them wait (as many as the bundles in flight may leave unsettled), they
///   commit in the background, before anybody needs them;
/// - no result waits longer than the maximum delay for others to fill a batch: the first one to
///   wait starts a timer (``SubmitAction/startTimer``), and when it fires (``timerFired()``)
///   whatever waits commits. the contract checkpoints a step "as soon as its response arrives"; this
///   keeps that to milliseconds even when the batch cannot fill (one bundle left, the others
///   claiming or moving, the next step a long upload or a retry's wait);
/// - when a bundle settles a result still waiting and no commit is under way, everything waiting
///   commits at once, on that bundle's time;
/// - one batch commits at a time; results handed in meanwhile go in the next, which starts as soon
///   as the current one ends if it is full, somebody needs one of its results, or the timer fired.
///
/// `Waiter` is whatever resumes a settling bundle (a continuation; a number in tests).
public struct GroupCommitState<Waiter> {
    public typealias Ticket = Int

    /// Results committing together in one transaction, in the order they were handed in.
    public struct Batch: Sendable, Equatable {
        public let tickets: [Ticket]
        public let results: [CheckpointStore.StepResult]
    }

    /// What ``submit(_:)`` asks for besides the ticket.
    public enum SubmitAction: Equatable {
        case none
        /// Commit this batch in the background (it is full).
        case commit(Batch)
        /// Call ``timerFired()`` after the maximum delay: this result is the first to wait.
        case startTimer
    }

    /// What ``settle(_:waiter:)`` asks for.
    public enum SettleAction {
        /// The result is already committed (or failed): resume the waiter with this at once.
        case resume(CheckpointError?)
        /// It is in a commit under way, or in the next batch: ``committed(_:outcomes:)`` resumes the waiter.
        case wait
        /// Commit this batch now (it holds the result); ``committed(_:outcomes:)`` resumes the waiter.
        case commit(Batch)
    }

    public let batchSize: Int
    private var nextTicket = 0
    private var waiting: [(ticket: Ticket, result: CheckpointStore.StepResult)] = []
    /// The tickets of the batch committing, if one is.
    private var committing: [Ticket]? = nil
    private var timerPending = false
    /// The timer fired during a commit: the next batch starts when it ends, full or not.
    private var flushAfterCommit = false
    /// Outcomes of committed results whose bundle has not settled them yet (nil: committed).
    private var outcomes: [Ticket: CheckpointError?] = [:]
    /// Bundles waiting for a result that is not committed yet.
    private var waiters: [Ticket: Waiter] = [:]

    public init(batchSize: Int) {
        self.batchSize = max(batchSize, 1)
    }

    /// Results handed in and not yet in a commit.
    public var waitingCount: Int { waiting.count }
    /// Whether a batch is committing.
    public var isCommitting: Bool { committing != nil }

    /// Hands in a result; returns its ticket, and what to do: commit a batch this result filled, or
    /// start the timer that bounds how long it may wait.
    public mutating func submit(_ result: CheckpointStore.StepResult) -> (Ticket, SubmitAction) {
        let ticket = nextTicket
        nextTicket += 1
        waiting.append((ticket, result))
        if waiting.count >= batchSize, let batch = startBatch() { return (ticket, .commit(batch)) }
        // One timer at a time: a pending one fires no later than this result's own would.
        guard !timerPending else { return (ticket, .none) }
        timerPending = true
        return (ticket, .startTimer)
    }

    /// The maximum delay has passed since the timer started: whatever waits commits now, or, with a
    /// commit under way, as soon as it ends.
    public mutating func timerFired() -> Batch? {
        timerPending = false
        if let batch = startBatch() { return batch }
        if !waiting.isEmpty { flushAfterCommit = true }
        return nil
    }

    /// A bundle needs `ticket`'s result committed before it goes on. Settle each ticket once.
    public mutating func settle(_ ticket: Ticket, waiter: Waiter) -> SettleAction {
        precondition(ticket < nextTicket && waiters[ticket] == nil, "settle each ticket handed out, once")
        if let outcome = outcomes.removeValue(forKey: ticket) { return .resume(outcome) }
        waiters[ticket] = waiter
        if waiting.contains(where: { $0.ticket == ticket }), let batch = startBatch() { return .commit(batch) }
        return .wait
    }

    /// `batch` committed with `outcomes` (one per result, nil when recorded). Returns the waiters to
    /// resume, and the next batch to commit at once when one is due.
    public mutating func committed(_ batch: Batch, outcomes batchOutcomes: [CheckpointError?]) -> (
        resume: [(Waiter, CheckpointError?)], next: Batch?
    ) {
        precondition(batch.tickets.count == batchOutcomes.count, "one outcome per result")
        precondition(committing == batch.tickets, "the batch that was committing")
        committing = nil
        var resume: [(Waiter, CheckpointError?)] = []
        for (ticket, outcome) in zip(batch.tickets, batchOutcomes) {
            if let waiter = waiters.removeValue(forKey: ticket) {
                resume.append((waiter, outcome))
            } else {
                outcomes[ticket] = outcome
            }
        }
        let due = waiting.count >= batchSize || flushAfterCommit || waiting.contains { waiters[$0.ticket] != nil }
        return (resume, due ? startBatch() : nil)
    }

    private mutating func startBatch() -> Batch? {
        guard committing == nil, !waiting.isEmpty else { return nil }
        let batch = Batch(tickets: waiting.map(\.ticket), results: waiting.map(\.result))
        committing = batch.tickets
        flushAfterCommit = false
        waiting.removeAll(keepingCapacity: true)
        return batch
    }
}

/// The run's group commit of step results, through the run's ``CheckpointWriter`` (the rules are
/// ``GroupCommitState``'s).
///
/// Why: a commit of its own for every step cost about a fifth of the worker's CPU (each takes and
/// drops the cross-process write lock, SQLite's own file locks, and writes a few WAL pages), and
/// that CPU was taken from the API server on a small machine. With the results of the bundles in
/// flight sharing transactions, a run of 4 bundles at once commits about a third as often.
///
/// Batches are committed on the writer's thread, which resumes the bundles waiting for them: no
/// task's thread (an event loop in `dopesync`) ever waits for the database.
///
/// Its timer is a task scheduled on one of NIO's event loops, scoped by
/// ``with(storage:batchSize:maximumDelay:onCommitted:_:)``: when the scope ends, the timer is
/// cancelled, what still waits commits at once, and a timer that fires late finds the scope ended
/// and does nothing, so nothing of the group commit (nor the database it holds) outlives the run.
/// Not `Task.sleep`: NIO's global executor takes no delayed job, so each sleep would wake
/// Dispatch's timer thread and one of its workers before the loop, for every batch.
public final class GroupCommit: Sendable {
    public typealias Ticket = GroupCommitState<Void>.Ticket
    private typealias State = GroupCommitState<CheckedContinuation<CheckpointError?, Never>>
    private let storage: any CheckpointStorage
    private let maximumDelay: Duration
    private let state: Mutex<State>
    private let tally = Mutex<(transactions: Int, results: Int)>((0, 0))
    private let onCommitted: @Sendable (_ results: Int) -> Void
    /// The timer started last (cancelled when the scope ends), and whether the scope has ended.
    private let timer = Mutex<(scheduled: Scheduled<Void>?, scopeEnded: Bool)>((nil, false))

    /// - Parameters:
    ///   - batchSize: results that commit together as soon as they wait.
    ///   - maximumDelay: the longest a result waits for others before it commits anyway.
    ///   - onCommitted: called on the writer's thread after each transaction, with its number of results.
    private init(
        storage: any CheckpointStorage, batchSize: Int, maximumDelay: Duration,
        onCommitted: @escaping @Sendable (_ results: Int) -> Void
    ) {
        self.storage = storage
        self.maximumDelay = maximumDelay
        self.state = Mutex(State(batchSize: batchSize))
        self.onCommitted = onCommitted
    }

    /// Runs `body` with a group commit over `storage`. When `body` returns, the timer stops and
    /// whatever still waits is committed (queued on the store).
    public static func with<Value>(
        storage: any CheckpointStorage, batchSize: Int, maximumDelay: Duration = .milliseconds(10),
        onCommitted: @escaping @Sendable (_ results: Int) -> Void = { _ in },
        _ body: (GroupCommit) async -> Value
    ) async -> Value {
        let commits = GroupCommit(
            storage: storage, batchSize: batchSize, maximumDelay: maximumDelay, onCommitted: onCommitted)
        let value = await body(commits)
        commits.endScope()
        return value
    }

    /// The first result to wait starts the timer; when it fires, whatever waits commits.
    ///
    /// The `timer` lock is held from the check that the scope goes on until the batch is queued on
    /// the store, and ``endScope()`` takes it first: a timer that fires as the scope ends has
    /// queued its batch before `with` returns, or commits nothing. Scheduled under that lock too,
    /// so the handle kept is always the newest timer's (a timer that fires waits for it).
    private func startTimer() {
        timer.withLock { timer in
            // Weak: the loop drops the closure it ran on its own thread, and the last reference to
            // the group commit would close the store there (an event loop never blocks).
            timer.scheduled = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(
                in: TimeAmount(maximumDelay)
            ) { [weak self] in
                guard let self else { return }
                self.timer.withLock { timer in
                    // Too late to be cancelled: the scope's end committed what waited.
                    guard !timer.scopeEnded else { return }
                    timerFired()
                }
            }
        }
    }

    /// Cancels the timer and commits what still waits: committing early is what it would do anyway.
    private func endScope() {
        let pending = timer.withLock { timer in
            timer.scopeEnded = true
            defer { timer.scheduled = nil }
            return timer.scheduled
        }
        pending?.cancel()
        timerFired()
    }

    private func timerFired() {
        if let batch = state.withLock({ $0.timerFired() }) { commit(batch) }
    }

    /// Transactions committed so far, and the results they held.
    public var committed: (transactions: Int, results: Int) { tally.withLock { $0 } }

    /// Hands in a step's result; it commits with others, within the maximum delay. Settle the ticket
    /// before handing in the bundle's next result and before moving the bundle.
    public func submit(_ result: CheckpointStore.StepResult) -> Ticket {
        let (ticket, action) = state.withLock { $0.submit(result) }
        switch action {
        case .none:
            break
        case .commit(let batch):
            // Queued on the writer: the bundle that filled the batch goes on sending its next step.
            commit(batch)
        case .startTimer:
            // The timer belongs to the batch, not to the bundle that started it: it fires on a loop,
            // whatever the bundle does meanwhile.
            startTimer()
        }
        return ticket
    }

    /// Returns once the ticket's result is committed (nil), or why it could not be.
    public func settle(_ ticket: Ticket) async -> CheckpointError? {
        await withCheckedContinuation { continuation in
            switch state.withLock({ $0.settle(ticket, waiter: continuation) }) {
            case .resume(let outcome): continuation.resume(returning: outcome)
            case .wait: break
            case .commit(let batch): commit(batch)  // this bundle needs it now
            }
        }
    }

    /// Queues `batch` on the writer; there it commits, resumes its waiters, and commits the next
    /// batch if one is due.
    private func commit(_ batch: State.Batch) {
        storage.recordResults(batch.results) { recorded in self.finish(batch, recorded) }
    }

    /// `batch` was committed (or the database failed): resumes its waiters and starts the next
    /// batch if one is due.
    private func finish(
        _ batch: State.Batch, _ recorded: Result<[Result<CompletedStep, CheckpointError>], CheckpointError>
    ) {
        let outcomes: [CheckpointError?]
        switch recorded {
        case .success(let results):
            outcomes = results.map { result in
                if case .failure(let error) = result { return error }
                return nil
            }
            tally.withLock { $0 = ($0.transactions + 1, $0.results + batch.results.count) }
            onCommitted(batch.results.count)
        case .failure(let error):
            // The database itself failed: every bundle of the batch hears it and gives its bundle back.
            outcomes = Array(repeating: error, count: batch.results.count)
        }
        let (resume, next) = state.withLock { $0.committed(batch, outcomes: outcomes) }
        for (waiter, outcome) in resume { waiter.resume(returning: outcome) }
        // On the writer's thread: the next batch, whoever needs it, is the writer's to commit.
        if let next { commit(next) }
    }
}
