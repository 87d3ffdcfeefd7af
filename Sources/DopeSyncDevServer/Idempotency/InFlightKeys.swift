import HTTPTypes
import Synchronization

/// The idempotency keys whose first request is being processed right now.
///
/// Kept in memory only: after a restart nothing is in flight. A key is claimed before the
/// stored-key lookup and released when the request is answered, so a concurrent twin of a
/// request sees 409 `idempotency_key_in_use` instead of creating a second record.
final class InFlightKeys: Sendable {
    struct Key: Hashable, Sendable {
        let credential: String
        let key: String
    }

    private let keys = Mutex<Set<Key>>([])

    /// Claims `key`; `false` if another request holds it.
    func claim(_ key: Key) -> Bool {
        keys.withLock { $0.insert(key).inserted }
    }

    func release(_ key: Key) {
        _ = keys.withLock { $0.remove(key) }
    }

    /// Runs `body` while holding `key`, or throws 409 if another request holds it.
    func withClaim<T>(_ key: Key, _ body: () async throws -> T) async throws -> T {
        guard claim(key) else {
            throw APIError(
                status: .conflict, code: .idempotencyKeyInUse,
                message: "a request with this Idempotency-Key is still being processed; try again later",
                field: "Idempotency-Key")
        }
        defer { release(key) }
        return try await body()
    }
}
