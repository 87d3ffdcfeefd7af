import Logging
import Synchronization

/// Whether the API answers the lookups of docs/api.yaml (`GET /api/sessions?clientId=` and
/// `GET /api/sessions/{id}`), as learnt by the run. Shared by the run's uploaders.
final class LookupSupport: Sendable {
    enum State: Sendable, Equatable {
        case unknown, available, missing
    }
    private let state = Mutex(State.unknown)

    var current: State { state.withLock { $0 } }

    /// Returns true the first time the API is found to lack them (one warning per run).
    func learn(_ new: State) -> Bool {
        state.withLock { state in
            defer { state = new }
            return new == .missing && state != .missing
        }
    }
}

/// The look before a step is sent again: finds a bundle's records on the server, so that a
/// request that may have reached it (no answer, a lost connection, a 5xx, a crash) is not sent
/// twice to an API that ignores `Idempotency-Key`. Keys stay the first layer; this is the second.
struct ServerLookup: Sendable {
    let client: APIClient
    let support: LookupSupport
    let counters: RunCounters
    let logger: Logger

    /// What a look found for one step.
    enum Look: Sendable {
        /// There, with the same content: its server id.
        case found(Int64)
        /// There with other content: the bundle fails for this reason.
        case differs(BundleFailure)
        /// Not there (or the API cannot say): send it.
        case absent
        /// The look failed: a failed try, nothing sent.
        case failed(StepResponse)
    }

    /// What a look found.
    enum Found: Sendable {
        /// The session's tree (nil: the session is not on the server).
        case tree(ServerTree?)
        /// The API has no lookups: keys alone must do.
        case unavailable
        /// The look itself failed (no answer, 5xx, …): nothing is known, nothing may be sent.
        case failed(StepResponse)
    }

    /// The server's tree of the session with this client id, found by `clientId` (one request
    /// when it is not there, two when it is).
    func tree(clientID: String) async -> Found {
        guard support.current != .missing else { return .unavailable }
        counters.request(bytes: 0)
        switch await client.get("/api/sessions?clientId=\(clientID)") {
        case .found(let bytes):
            _ = support.learn(.available)
            // Not JSON, or not this shape: the same answer as any other unreadable one, below.
            let items = (try? JSONValue.parse(bytes))?.objectValue?["items"]?.arrayValue
            guard let items else {
                return .failed(
                    .retryable(
                        status: 200, retryAfter: nil,
                        message: "a session lookup answered something that is not {\"items\": […]}"))
            }
            guard let id = items.first?.objectValue?["id"]?.numberValue, let serverID = Int64(id.literal) else {
                return .tree(nil)
            }
            return await tree(serverID: serverID)
        case .notFound(let status):
            if support.learn(.missing) {
                logger.warning(
                    "the API has no session lookups (GET /api/sessions answered \(status)): exactly once now rests on the API honouring Idempotency-Key alone",
                    metadata: ["http.status": "\(status)"])
            }
            return .unavailable
        case .failed(let response):
            return .failed(response)
        }
    }

    /// The server's tree of the session with this server id.
    func tree(serverID: Int64) async -> Found {
        guard support.current != .missing else { return .unavailable }
        counters.request(bytes: 0)
        switch await client.get("/api/sessions/\(serverID)") {
        case .found(let bytes):
            guard let tree = ServerTree(json: bytes) else {
                return .failed(
                    .retryable(
                        status: 200, retryAfter: nil, message: "the session tree of \(serverID) could not be read"))
            }
            return .tree(tree)
        case .notFound:
            // The clientId lookup is how support is learnt; a session that is gone has no records.
            return support.current == .available ? .tree(nil) : await probeThenAbsent()
        case .failed(let response):
            return .failed(response)
        }
    }

    /// A 404 for a tree before the run knows whether the API has lookups at all: ask the
    /// `clientId` endpoint once (with an id no session has) to learn it.
    private func probeThenAbsent() async -> Found {
        switch await tree(clientID: "00000000-0000-4000-8000-000000000000") {
        case .unavailable: .unavailable
        case .failed(let response): .failed(response)
        case .tree: .tree(nil)
        }
    }
}
