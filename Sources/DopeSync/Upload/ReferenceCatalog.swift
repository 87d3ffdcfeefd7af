import Foundation
import Logging

/// The server's reference lists for one run (docs/api.md, "Reference lists"):
/// read at most once, when a bundle first needs them, revalidated with the ETags kept in the
/// checkpoint store, and shared by the run's uploaders. Bundles that ask while the lists are
/// being read wait for that one read. A read that fails is not kept: the bundle that asked is
/// deferred (or given back) as a step's failure would make it, and the next bundle reads again.
actor ReferenceCatalog {
    /// What the lists say of a bundle's references.
    enum Check: Sendable, Equatable {
        /// Every id is listed, or its list is one the API does not serve.
        case passed
        /// The first id (in upload order) its list does not hold.
        case unknown(ReferenceUse)
        /// A list could not be read (after the retries): what its read answered.
        case listUnreadable(ReferenceList, StepResponse)
    }

    private typealias Read = Result<ReferenceIDs, ListFailure>

    private struct ListFailure: Error {
        let list: ReferenceList
        let response: StepResponse
    }

    private enum State {
        case unread
        /// Read by one bundle; the others wait here.
        case reading(waiting: [CheckedContinuation<Read, Never>])
        case read(ReferenceIDs)
    }

    private let client: APIClient
    private let checkpoints: any CheckpointStorage
    private let retry: RetryPolicy
    private let counters: RunCounters
    private let logger: Logger
    private var state = State.unread

    init(
        client: APIClient, checkpoints: any CheckpointStorage, retry: RetryPolicy, counters: RunCounters, logger: Logger
    ) {
        self.client = client
        self.checkpoints = checkpoints
        self.retry = retry
        self.counters = counters
        self.logger = logger
    }

    /// Checks `uses` against the lists, reading them first if this run has not.
    func check(_ uses: [ReferenceUse]) async -> Check {
        guard !uses.isEmpty else { return .passed }
        let read: Read
        switch state {
        case .read(let ids):
            read = .success(ids)
        case .reading(let waiting):
            read = await withCheckedContinuation { continuation in
                state = .reading(waiting: waiting + [continuation])
            }
        case .unread:
            state = .reading(waiting: [])
            read = await readLists()
            guard case .reading(let waiting) = state else { preconditionFailure("one read at a time") }
            if case .success(let ids) = read { state = .read(ids) } else { state = .unread }
            for waiter in waiting { waiter.resume(returning: read) }
        }
        switch read {
        case .success(let ids): return ids.firstUnknown(in: uses).map(Check.unknown) ?? .passed
        case .failure(let failure): return .listUnreadable(failure.list, failure.response)
        }
    }

    /// Reads the three lists, conditionally on the copies kept.
    private func readLists() async -> Read {
        var ids = ReferenceIDs()
        var missing: [String] = []
        var read: [String] = []
        // A kept list that cannot be read is read in full: the copy only spares the server.
        let keptLists = (try? await checkpoints.referenceLists()) ?? [:]
        for list in ReferenceList.allCases {
            let kept = keptLists[list]
            switch await fetch(list, ifNoneMatch: kept?.etag) {
            case .list(let body, let etag):
                guard let parsed = list.ids(fromBody: body) else {
                    return .failure(
                        ListFailure(
                            list: list,
                            response: .retryable(
                                status: 200, retryAfter: nil,
                                message:
                                    "GET \(list.path) answered something that is not a list {\"items\": [{\"id\": …}]}")
                        ))
                }
                ids.add(parsed)
                read.append("\(list.rawValue) \(parsed[list.kinds[0]]?.count ?? 0) (read)")
                keep(list, etag: etag, body: body)
            case .notModified:
                guard let kept, let parsed = list.ids(fromBody: kept.body) else {
                    return .failure(
                        ListFailure(
                            list: list,
                            response: .retryable(
                                status: 304, retryAfter: nil,
                                message: "GET \(list.path) answered 304 for a list this worker no longer holds")))
                }
                ids.add(parsed)
                read.append("\(list.rawValue) \(parsed[list.kinds[0]]?.count ?? 0) (unchanged)")
            case .notFound(let status):
                missing.append("GET \(list.path) answered \(status)")
            case .failed(.rejected(let status, _, let message, _)):
                // Refused as a request: the API cannot say, so its creates' 422s must, as without lists.
                missing.append("GET \(list.path) answered \(status): \(message)")
            case .failed(let response):
                return .failure(ListFailure(list: list, response: response))
            }
        }
        if !missing.isEmpty {
            logger.warning(
                "the API has no reference lists to check a bundle's ids before its first request: an id it does not know is found by the create's 422, after the records before it are on the server",
                metadata: ["lists": "\(missing.joined(separator: "; "))"])
        }
        if !read.isEmpty {
            logger.info("reference lists read", metadata: ["lists": "\(read.joined(separator: ", "))"])
        }
        return .success(ids)
    }

    /// Keeps a list read in full without waiting for the write: the copy only saves the next run
    /// a full read, and no bundle should wait for it behind a database lock held elsewhere.
    private nonisolated func keep(_ list: ReferenceList, etag: String?, body: [UInt8]) {
        checkpoints.keepReferenceList(list, etag: etag, body: body) { [logger] error in
            logger.warning("a reference list could not be kept for the next run", metadata: ["error": "\(error)"])
        }
    }

    /// One list's read, retried as a step is (backoff with jitter, `Retry-After`), and sent once
    /// more with a token read anew after a 401 or 403.
    private func fetch(_ list: ReferenceList, ifNoneMatch etag: String?) async -> APIClient.ListAnswer {
        var retry = 0
        var renewedCredential = false
        while true {
            let used = client.credential.current
            counters.request(bytes: 0)
            let answer = await client.getList(list.path, ifNoneMatch: etag)
            if case .failed(.unauthorized(let status, _)) = answer, status != 407, !renewedCredential,
                await client.credential.renewed(after: used, logger: logger) != nil
            {
                renewedCredential = true
                continue
            }
            guard case .failed(.retryable(_, let retryAfter, let message)) = answer else { return answer }
            retry += 1
            guard retry < self.retry.attempts, !counters.shouldStop,
                let delay = self.retry.delay(
                    beforeRetry: retry, retryAfter: retryAfter, random: Double.random(in: 0..<1))
            else { return answer }
            logger.info(
                "retrying the read of a reference list",
                metadata: ["list": "\(list.path)", "message": "\(message)", "retry": "\(retry)"])
            do { try await sleepOnLoop(for: delay) } catch { return answer }
        }
    }
}
