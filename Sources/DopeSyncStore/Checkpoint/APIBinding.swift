import DopeSyncBundle
import DopeSyncSupport
import Foundation

/// An API base URL as the store records it: scheme and host in lower case, the port always
/// written, the path without a trailing slash; no user, query or fragment. So
/// `HTTPS://API.example.com/` and `https://api.example.com:443` are one address.
public enum APIAddress {
    public static func normalized(_ url: String) -> String {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            let host = components.host?.lowercased()
        else { return url }
        let port = components.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : 0)
        var path = components.percentEncodedPath
        while path.hasSuffix("/") { path.removeLast() }
        let bracketed = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        return "\(scheme)://\(bracketed):\(port)\(path)"
    }
}

/// The APIs a store knows: each URL a run used with the API it is (itself, or an earlier URL of
/// the same API), and how many sessions each API's checkpoints hold.
public struct APIBook: Sendable, Equatable {
    /// The key of ``sessions`` for sessions recorded before APIs were (adopted by the next run).
    public static let unbound = ""
    /// URL → the API it is.
    public var addresses: [String: String] = [:]
    /// API → its sessions.
    public var sessions: [String: Int] = [:]

    public init(addresses: [String: String] = [:], sessions: [String: Int] = [:]) {
        self.addresses = addresses
        self.sessions = sessions
    }

    /// Counts, by API, the sessions with at least one step done: a session whose steps were only
    /// sent has no fact to lose by a change of API. One statement for both stores (`schema`:
    /// `dopesync.` on PostgreSQL).
    package static func sessionsWithStepsDone(schema: String) -> String {
        """
        SELECT s.api, count(*) AS sessions FROM \(schema)sessions s
        WHERE EXISTS (SELECT 1 FROM \(schema)steps t WHERE t.session_id = s.session_id AND t.state = 'done')
        GROUP BY s.api
        """
    }

    /// The APIs other than `api` whose checkpoints the store holds, with their sessions.
    public func others(than api: String) -> [(api: String, sessions: Int)] {
        sessions.filter { $0.key != api && $0.key != Self.unbound && $0.value > 0 }.sorted { $0.key < $1.key }
            .map { (api: $0.key, sessions: $0.value) }
    }
}

/// Which API a run's checkpoints belong to. A step recorded against one API is a fact there
/// alone: against another it is an unknown outcome (looked up, else sent), and its server id never
/// reaches the other. Where the other API cannot look anything up, nothing tells a new server
/// from the same one at a new address, and the operator must say which (`dopesync api`).
public enum APIBinding: Sendable, Equatable {
    /// The URL is known: the API it is.
    case known(api: String)
    /// A URL new to a store that holds no other API's checkpoints: record it as an API of its own
    /// (the sessions from before APIs were recorded are its).
    case record(api: String)
    /// A URL new to a store that holds other APIs' checkpoints: with lookups, record it as an API
    /// of its own (their steps are looked up here before anything is sent); without, refuse.
    case needsLookups(others: [String])

    public static func decide(url: String, book: APIBook) -> APIBinding {
        if let api = book.addresses[url] { return .known(api: api) }
        let others = book.others(than: url)
        return others.isEmpty ? .record(api: url) : .needsLookups(others: others.map(\.api))
    }

    /// The refusal of a run against `url`, an API without lookups, by a store holding the
    /// checkpoints of `others`: both URLs and the two answers the operator may give.
    public static func refusal(url: String, others: [String], book: APIBook, spoolRoot: String) -> String {
        let listed = others.map { "\($0) (\(book.sessions[$0] ?? 0) sessions)" }.joined(separator: ", ")
        let old = others.first ?? "URL"
        return "the checkpoints here were recorded against another API, \(listed), and the API configured now, \(url), "
            + "has no lookups (GET /api/sessions?clientId=…): dopesync cannot tell a new server from the same one at a "
            + "new address, so the run claims nothing (exit 78). If \(url) is the same API at a new address (its "
            + "records and ids are those of \(old)): `dopesync api --spool \(spoolRoot) --same-as \(old)` "
            + "(with this run's --job or --api). If it is another server, which holds none of those records: "
            + "`dopesync api --spool \(spoolRoot) --another-server`; every record is then sent to it."
    }
}
