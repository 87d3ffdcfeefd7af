import DopeSyncBundle
import DopeSyncSupport
import NIOPosix
import Synchronization
import ThreadRules

/// A run's one way to its ``CheckpointStore``: every call runs on a thread of the writer's own,
/// one at a time, in the order asked.
///
/// Why: in `dopesync` the tasks run on NIO's event loops (ARCHITECTURE.md, "Threads"). A write
/// may wait for another process's write transaction (the cross-process lock, up to the busy
/// timeout), and every other call waits for the connection meanwhile. On an event loop that wait
/// would stop every connection of the loop: answers unread, the progress line frozen. Here only
/// the writer's thread waits; the tasks that need a checkpoint suspend until it is done. The model
/// is GRDB's `SerializedDatabase`: one connection, one serial queue in front of it.
///
/// The store itself stays synchronous, for the commands (`status`, `requeue`, `prune`) and the
/// tests, where nothing else shares the thread.
public final class CheckpointWriter: Sendable {
    private let store: CheckpointStore
    private let thread: NIOThreadPool
    /// Calls asked for and not yet run: the scope's end waits for them, since NIO's pool hands
    /// work still queued at its shutdown a `.cancelled` state instead of running it.
    private let outstanding = Atomic(0)

    private init(store: CheckpointStore, thread: NIOThreadPool) {
        self.store = store
        self.thread = thread
    }

    /// Runs `body` with a writer over `store`. The writer's thread starts here and stops when
    /// `body` returns, after the calls already asked for (those they ask for in turn included: a
    /// commit that starts the next batch).
    public static func with<Value, Failure: Error>(
        _ store: CheckpointStore, _ body: (CheckpointWriter) async throws(Failure) -> Value
    ) async throws(Failure) -> Value {
        try await onThreadOfItsOwn { thread async throws(Failure) in try await with(store, on: thread, body) }
    }

    /// Runs `body` with a one-thread pool, stopped when `body` returns.
    private static func onThreadOfItsOwn<Value, Failure: Error>(
        _ body: (NIOThreadPool) async throws(Failure) -> Value
    ) async throws(Failure) -> Value {
        let thread = NIOThreadPool(numberOfThreads: 1)
        thread.start()
        let result: Result<Value, Failure>
        do {
            result = .success(try await body(thread))
        } catch {
            result = .failure(error)
        }
        // It fails only if already shut down, which nothing else does: nothing to report.
        try? await thread.shutdownGracefully()
        return try result.get()
    }

    private static func with<Value, Failure: Error>(
        _ store: CheckpointStore, on thread: NIOThreadPool, _ body: (CheckpointWriter) async throws(Failure) -> Value
    ) async throws(Failure) -> Value {
        let result: Result<Value, Failure>
        let writer = CheckpointWriter(store: store, thread: thread)
        do {
            result = .success(try await body(writer))
        } catch {
            result = .failure(error)
        }
        while writer.outstanding.load(ordering: .acquiring) > 0 {
            _ = try? await writer.perform { _ in }  // runs after everything queued before it
        }
        return try result.get()
    }

    /// Opens a store on the writer's own thread (`open` may wait for another process's lock and
    /// migrate), runs `body` with a writer over it, and closes the store on that thread when `body`
    /// and the calls it asked for are done: no part of the store's life is on the caller's thread,
    /// an event loop in `dopesync run`. Throws what `open` threw, having run nothing.
    public static func with<Value, OpenFailure: Error>(
        opening open: @escaping @Sendable () throws(OpenFailure) -> CheckpointStore,
        _ body: (CheckpointWriter) async -> Value
    ) async throws(OpenFailure) -> Value {
        try await onThreadOfItsOwn { thread async throws(OpenFailure) in
            let store = try await thread.runToCompletion { Result { () throws(OpenFailure) in try open() } }.get()
            let value = await with(store, on: thread, body)
            // After every call queued, those queued by others included (`with(_:on:_:)` drains them).
            await thread.runToCompletion { store.close() }
            return value
        }
    }

    /// Runs `body` on the writer's thread and returns what it returned or threw.
    ///
    /// It runs even if the calling task is cancelled: a checkpoint asked for is one the run relies on.
    /// (`body` may throw untyped, since Swift infers closures so; the store's calls throw only
    /// ``CheckpointError``, and anything else would arrive as the unnamed ``CheckpointError/Code/database``.)
    public func perform<Value: Sendable>(
        _ body: @escaping @Sendable (CheckpointStore) throws -> Value
    ) async throws(CheckpointError) -> Value {
        let result: Result<Value, CheckpointError> = await withCheckedContinuation { continuation in
            submit { store in
                guard let store else { return continuation.resume(returning: .failure(Self.stopped)) }
                do {
                    continuation.resume(returning: .success(try body(store)))
                } catch let error as CheckpointError {
                    continuation.resume(returning: .failure(error))
                } catch {
                    continuation.resume(returning: .failure(CheckpointError(code: .database, message: "\(error)")))
                }
            }
        }
        return try result.get()
    }

    /// Queues `body` on the writer's thread and returns at once; `body` gets the store, or nil once
    /// the writer has stopped. For work whose end is reported by other means (the group commit
    /// resumes its waiters from the writer's thread).
    public func submit(_ body: @escaping @Sendable (CheckpointStore?) -> Void) {
        outstanding.add(1, ordering: .relaxed)
        thread.submit { [self] state in
            switch state {
            case .active: body(store)
            case .cancelled: body(nil)
            }
            outstanding.subtract(1, ordering: .releasing)
        }
    }

    /// Records a step's intents (``CheckpointStore/recordIntents(sessionID:_:now:)``) on the
    /// writer's thread, whatever thread asks.
    public func recordIntents(sessionID: String, _ intents: [CheckpointStore.StepIntent]) async throws(CheckpointError)
        -> [StepIntentOutcome]
    {
        try await perform { try $0.recordIntents(sessionID: sessionID, intents) }
    }

    package static let stopped = CheckpointError(code: .database, message: "the checkpoint writer has stopped")
}
