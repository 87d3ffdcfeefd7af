import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Sends a signal to a child process as the dev server takes a chosen request: mid-upload,
/// with a request of the child in flight, whatever the machine's speed (a timer would strike
/// at a different step on every run).
///
/// Call ``requestArrived()`` from the server's `onRequest`; ``aim(at:after:)`` names the child and
/// how many requests from now it is struck at. Each aim strikes once. ``struck`` yields as the
/// signal is sent, for a test that goes on from that moment.
public final class SignalAtRequest: Sendable {
    private struct State {
        var seen = 0
        var target = 0
        var child: Spawned?
    }
    private let state = Mutex(State())
    private let signal: Int32
    private let strikes: AsyncStream<Void>.Continuation
    /// One element each time the signal is sent.
    public let struck: AsyncStream<Void>

    public init(_ signal: Int32) {
        self.signal = signal
        (struck, strikes) = AsyncStream.makeStream(of: Void.self)
    }

    /// Strikes `child` as the server takes the `after`-th request from now (0: at once).
    public func aim(at child: Spawned, after requests: Int) {
        guard requests > 0 else {
            strike(child)
            return
        }
        state.withLock { state in (state.target, state.child) = (state.seen + requests, child) }
    }

    /// Nothing is struck any more (the child ended first).
    public func disarm() {
        state.withLock { $0.child = nil }
    }

    /// For the dev server's `onRequest`: counts the request, and strikes when it is the one aimed at.
    public func requestArrived() {
        let child = state.withLock { state -> Spawned? in
            state.seen += 1
            guard let child = state.child, state.seen >= state.target else { return nil }
            state.child = nil
            return child
        }
        if let child { strike(child) }
    }

    private func strike(_ child: Spawned) {
        child.kill(signal)
        strikes.yield()
    }
}
