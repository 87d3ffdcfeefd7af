import Hummingbird
import NIOCore

/// The request context of every route: Hummingbird's core storage plus the connection (so a
/// fault can close it without answering) and the faults decided for this request.
struct DevServerRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    /// The connection the request came on.
    let channel: any Channel
    /// Decided once by ``DevServerMiddleware`` for `/api` POSTs; `.none` elsewhere.
    var faults: FaultDecision = .none

    init(source: ApplicationRequestContextSource) {
        coreContext = CoreRequestContextStorage(source: source)
        channel = source.channel
    }

    /// Bodies are read through ``BoundedBody`` with per-route limits, never decoded by Hummingbird.
    var maxUploadSize: Int { 1024 * 1024 }
}

/// Thrown after a committed request's connection was closed on purpose
/// (`--drop-after-commit-rate`): there is no response to send.
struct ConnectionDroppedAfterCommit: Error {}
