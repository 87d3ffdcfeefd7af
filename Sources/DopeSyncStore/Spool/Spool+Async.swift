import Foundation

// The spool's calls for async code. Each synchronous call that may block on the spool's file
// system is unavailable from async code (`noasync`: a stalled `hard` NFS mount would hold an event
// loop, and every connection and lease renewal on it): its twin here runs it on the spool's
// threads (``SpoolCalls``), as NIOFileSystem's calls run on its thread pool. Async code that
// writes `try await spool.list(.done)` gets this one; the synchronous one is left for closures
// that already run there.

extension Spool {
    public func create() async throws(SpoolError) {
        try await SpoolCalls.run { () throws(SpoolError) in try create() }
    }

    public func scan(now: Date = Date(), minAge: Duration = .seconds(5)) async throws(SpoolError) -> [SpoolEntry] {
        try await SpoolCalls.run { () throws(SpoolError) in try scan(now: now, minAge: minAge) }
    }

    public func processingEntries() async throws(SpoolError) -> [SpoolEntry] {
        try await SpoolCalls.run { () throws(SpoolError) in try processingEntries() }
    }

    public func list(_ folder: Folder) async throws(SpoolError) -> [SpoolEntry] {
        try await SpoolCalls.run { () throws(SpoolError) in try list(folder) }
    }

    public func claim(_ entry: SpoolEntry, leased: Bool = false) async throws(SpoolError) -> ClaimedBundle? {
        try await SpoolCalls.run { () throws(SpoolError) in try claim(entry, leased: leased) }
    }

    public func claimOrphan(_ entry: SpoolEntry, lockRequired: Bool = true, leased: Bool = false)
        async throws(SpoolError) -> ClaimedBundle?
    {
        try await SpoolCalls.run { () throws(SpoolError) in
            try claimOrphan(entry, lockRequired: lockRequired, leased: leased)
        }
    }

    public func holdSession(_ sessionID: String, besideOlderVersions: Bool = false) async throws(SpoolError)
        -> SessionHold?
    {
        try await SpoolCalls.run { () throws(SpoolError) in
            try holdSession(sessionID, besideOlderVersions: besideOlderVersions)
        }
    }

    public func pruneSessionHolds(before cutoff: Date) async -> Int {
        await SpoolCalls.run { pruneSessionHolds(before: cutoff) }
    }

    public func requeueFailed(_ name: String, now: Date = Date()) async throws(SpoolError) -> String {
        try await SpoolCalls.run { () throws(SpoolError) in try requeueFailed(name, now: now) }
    }

    public func deleteDone(_ entry: SpoolEntry) async -> Int32 {
        await SpoolCalls.run { deleteDone(entry) }
    }
}

extension ClaimedBundle {
    /// Lets the claim go on the spool's threads: over NFS the close sends the unlock and waits for
    /// the server's answer, which a stalled server never gives.
    public func release() async {
        await SpoolCalls.run { self.release() }
    }
}

extension SessionHold {
    public func release() async {
        await SpoolCalls.run { self.release() }
    }
}

extension StoreLock {
    public func release() async {
        await SpoolCalls.run { self.release() }
    }

    public static func take(_ mode: Mode, in spool: Spool) async throws(SpoolError) -> StoreLock? {
        try await SpoolCalls.run { () throws(SpoolError) in try take(mode, in: spool) }
    }
}

extension SpoolBinding {
    public static func read(_ spool: Spool) async throws(SpoolBindingError) -> StoreIdentity? {
        try await SpoolCalls.run { () throws(SpoolBindingError) in try read(spool) }
    }

    @discardableResult
    public static func check(_ spool: Spool, store: StoreIdentity, bindIfUnbound: Bool) async throws(SpoolBindingError)
        -> Bool
    {
        try await SpoolCalls.run { () throws(SpoolBindingError) in
            try check(spool, store: store, bindIfUnbound: bindIfUnbound)
        }
    }

    public static func rebind(_ spool: Spool, to store: StoreIdentity) async throws(SpoolBindingError) {
        try await SpoolCalls.run { () throws(SpoolBindingError) in try rebind(spool, to: store) }
    }
}

extension FileSystemSpace {
    /// The free and total bytes of the file system holding `folder`, read on the spool's threads.
    public static func of(_ folder: String) async -> FileSystemSpace? {
        await SpoolCalls.run { FileSystemSpace(of: folder) }
    }
}

extension SpoolBacklog {
    package static func list(_ spool: Spool, inFlight: [String: BundleState], now: Date) async throws -> SpoolBacklog {
        try await SpoolCalls.run { try list(spool, inFlight: inFlight, now: now) }
    }
}

extension ErrorSidecar {
    public static func read(from path: String) async -> ErrorSidecar? {
        await SpoolCalls.run { read(from: path) }
    }
}
