import Synchronization

/// Items handed out one at a time, in order, to concurrent takers: a run's bundles to its upload
/// slots, a benchmark's plans to its connections.
public final class WorkQueue<Item: Sendable>: Sendable {
    private let items: Mutex<ArraySlice<Item>>

    public init(_ items: [Item]) { self.items = Mutex(items[...]) }

    /// The next item, or nil once all were taken.
    public func next() -> Item? { items.withLock { $0.popFirst() } }
}
