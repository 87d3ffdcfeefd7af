import DopeSyncBundle
import DopeSyncSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Who dropped a bundle: its file's owner as the spool's file system reports it (the same uid on
/// every host of a shared spool), with the name this host gives it, for messages.
public struct Producer: Sendable, Hashable, CustomStringConvertible {
    public var uid: UInt32
    public var name: String

    public init(uid: UInt32, name: String) {
        self.uid = uid
        self.name = name
    }

    /// The owner `uid`, named by this host's user database (`uid N` when it has no name).
    public init(uid: UInt32) {
        self.init(uid: uid, name: FileSystem.userName(uid_t(uid)))
    }

    public var description: String { name == "uid \(uid)" ? name : "\(name) (uid \(uid))" }

    /// Producers are the same by uid; a name is only what one host calls it.
    public static func == (lhs: Producer, rhs: Producer) -> Bool { lhs.uid == rhs.uid }
    public func hash(into hasher: inout Hasher) { hasher.combine(uid) }
}

/// What the store holds of a session beside its steps (the `sessions` table): the API its steps
/// were recorded against and the producer that first sent it. Nil fields come from a store made
/// before these were kept: the next run's API and the next bundle's owner adopt them.
public struct SessionBinding: Sendable, Equatable {
    public var api: String?
    public var owner: Producer?

    public init(api: String?, owner: Producer?) {
        self.api = api
        self.owner = owner
    }

    /// What a claimed bundle of `producer`, uploading to `api`, may do with the session's row
    /// `existing` (nil: the session is new to the store). The one rule, for every store: each
    /// executes the decision, none decides.
    public static func decide(existing: SessionBinding?, producer: Producer, api: String) -> SessionBindingDecision {
        guard let existing else { return .bind(SessionBinding(api: api, owner: producer), forgetServerIDs: false) }
        if let owner = existing.owner, owner != producer { return .anotherProducer(owner) }
        if existing.owner != nil && existing.api == api { return .continuation }
        // An API of its own that is not this one: what its steps recorded is an unknown outcome
        // here, and a server id from there must never reach this API.
        let otherAPI = existing.api != nil && existing.api != api
        return .bind(SessionBinding(api: api, owner: existing.owner ?? producer), forgetServerIDs: otherAPI)
    }
}

/// What ``SessionBinding/decide(existing:producer:api:)`` says of a claimed bundle's session.
public enum SessionBindingDecision: Sendable, Equatable {
    /// The session is this producer's and its steps were recorded against this API: resume.
    case continuation
    /// Write the session's row as given, then resume. `forgetServerIDs`: its steps done were
    /// recorded against another API; each becomes an intent whose outcome is unknown (looked up
    /// where the API has lookups, else sent), and its server id is dropped.
    case bind(SessionBinding, forgetServerIDs: Bool)
    /// Another producer sent this session first: the bundle fails before anything is sent.
    case anotherProducer(Producer)
}

/// What the store says of a claimed bundle's session.
public enum SessionClaim: Sendable, Equatable {
    /// The session's steps already done (against this API), by step key.
    case resume([String: CompletedStep])
    /// The session belongs to another producer: nothing of the bundle may be sent.
    case anotherProducer(Producer)
}
