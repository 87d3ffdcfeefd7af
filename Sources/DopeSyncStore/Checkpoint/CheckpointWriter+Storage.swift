import DopeSyncBundle
import DopeSyncSupport
import Foundation

/// The one-host store: the SQLite file in the spool, reached through the writer's thread. Its
/// claims are the spool's own (``SpoolClaims``).
extension CheckpointWriter: CheckpointStorage {
    public var isUnreachable: Bool { false }

    public func recordRunStarted(runID: String, host: String, pid: Int32) async throws(CheckpointError) {
        try await perform { try $0.recordRunStarted(runID: runID, host: host, pid: pid) }
    }

    public func recordRunFinished(runID: String, summary: RunSummary, healthy: Bool?, apiLookups: Bool?)
        async throws(CheckpointError)
    {
        try await perform {
            try $0.recordRunFinished(runID: runID, summary: summary, healthy: healthy, apiLookups: apiLookups)
        }
    }

    public func halfSessions() async throws(CheckpointError) -> [HalfSession] {
        try await perform { try $0.halfSessions() }
    }

    public func lastHealthyRunFinishedAt(notAfter latest: Date) async throws(CheckpointError) -> Date? {
        try await perform { try $0.lastHealthyRunFinishedAt(notAfter: latest) }
    }

    public func bundlesInFlight() async throws(CheckpointError) -> [String: BundleState] {
        try await perform { try $0.bundlesInFlight() }
    }

    public func doneTimes() async throws(CheckpointError) -> [String: Date] {
        try await perform { try $0.doneTimes() }
    }

    public func bundleState(name: String) async throws(CheckpointError) -> BundleState? {
        try await perform { try $0.bundleState(name: name) }
    }

    public func beginReading(name: String, now: Date) async throws(CheckpointError) -> Int {
        try await perform { try $0.beginReading(name: name, now: now) }
    }

    public func recordClaim(
        name: String, sessionID: String, owner: ClaimOwner, producer: Producer, api: String, totalSteps: Int,
        now: Date
    ) async throws(CheckpointError) -> SessionClaim {
        // One trip to the writer and one transaction: the claim, the session's binding and what
        // the session has done.
        try await perform {
            try $0.recordClaim(
                name: name, sessionID: sessionID, owner: owner, producer: producer, api: api, totalSteps: totalSteps,
                now: now)
        }
    }

    public func apiBook(countingSessions: Bool) async throws(CheckpointError) -> APIBook {
        try await perform { try $0.apiBook(countingSessions: countingSessions) }
    }

    public func recordAPIAddress(_ url: String, api: String, adoptUnbound: Bool) async throws(CheckpointError) {
        try await perform { try $0.recordAPIAddress(url, api: api, adoptUnbound: adoptUnbound) }
    }

    public func recordDeferral(name: String, sessionID: String?, error: BundleFailure, policy: DeferralPolicy)
        async throws(CheckpointError) -> Deferral
    {
        try await perform { try $0.recordDeferral(name: name, sessionID: sessionID, error: error, policy: policy) }
    }

    public func recordDone(name: String, sessionID: String?, finalName: String) async throws(CheckpointError) {
        try await perform {
            try $0.recordDone(name: name, sessionID: sessionID)
            if finalName != name { try $0.renamed(from: name, to: finalName, keepingALiveRow: true) }
        }
    }

    public func recordFailure(name: String, sessionID: String?, error: BundleFailure, finalName: String)
        async throws(CheckpointError)
    {
        try await perform {
            try $0.recordFailure(name: name, sessionID: sessionID, error: error)
            if finalName != name { try $0.renamed(from: name, to: finalName, keepingALiveRow: true) }
        }
    }

    public func recordGivenBack(name: String, finalName: String, counted: Bool) async throws(CheckpointError) {
        try await perform {
            // A counted give-back (a deferral) recorded its outcome before the move.
            if !counted { try $0.recordReturned(name: name) }
            if finalName != name { try $0.renamed(from: name, to: finalName, keepingALiveRow: false) }
        }
    }

    public func recordFoundOnServer(
        sessionID: String, _ found: [(intent: CheckpointStore.StepIntent, serverID: Int64)]
    ) async throws(CheckpointError) -> [CompletedStep] {
        try await perform { try $0.recordFoundOnServer(sessionID: sessionID, found) }
    }

    public func recordResults(
        _ results: [CheckpointStore.StepResult],
        then: @escaping @Sendable (Result<[Result<CompletedStep, CheckpointError>], CheckpointError>) -> Void
    ) {
        submit { store in
            guard let store else { return then(.failure(CheckpointWriter.stopped)) }
            then(Result { () throws(CheckpointError) in try store.recordResults(results) })
        }
    }

    public func referenceLists() async throws(CheckpointError) -> [ReferenceList: CachedReferenceList] {
        try await perform { try $0.referenceLists() }
    }

    public func keepReferenceList(
        _ list: ReferenceList, etag: String?, body: [UInt8], failed: @escaping @Sendable (CheckpointError) -> Void
    ) {
        submit { store in
            do throws(CheckpointError) {
                guard let store else { throw CheckpointWriter.stopped }
                try store.saveReferenceList(list, etag: etag, body: body)
            } catch {
                failed(error)
            }
        }
    }
}
