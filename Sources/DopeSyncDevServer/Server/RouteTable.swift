import HTTPTypes
import Hummingbird

/// One route: a method on a path pattern, and what answers it.
struct Route: Sendable {
    typealias Handler = @Sendable (Request, DevServerRequestContext) async throws -> Response

    let method: HTTPRequest.Method
    /// `/api/sessions/:sessionId`: a `:name` segment takes any one segment, as Hummingbird's.
    let path: String
    let handler: Handler

    init(_ method: HTTPRequest.Method, _ path: String, handler: @escaping Handler) {
        self.method = method
        self.path = path
        self.handler = handler
    }
}

/// Which methods each path takes, built from the routes themselves, so that a method a path
/// does not take is answered 405 with `Allow` (RFC 9110 §15.5.6) and only an unknown path 404.
///
/// Paths are matched as Hummingbird's trie matches the patterns used here: split on `/` with
/// empty segments ignored, a `:name` segment taking any one segment, every other one literal.
struct RouteTable: Sendable {
    private struct Entry: Sendable {
        let segments: [Substring]
        var methods: [HTTPRequest.Method]
    }

    private var entries: [Entry] = []

    init(_ routes: [(method: HTTPRequest.Method, path: String)]) {
        for route in routes {
            let segments = route.path.split(separator: "/")
            if let index = entries.firstIndex(where: { $0.segments == segments }) {
                if !entries[index].methods.contains(route.method) { entries[index].methods.append(route.method) }
            } else {
                entries.append(Entry(segments: segments, methods: [route.method]))
            }
        }
    }

    /// The methods that `path` (no query) takes, sorted by name; `nil` when no route has that path.
    func methods(forPath path: String) -> [HTTPRequest.Method]? {
        let segments = path.split(separator: "/")
        var methods: [HTTPRequest.Method] = []
        var found = false
        for entry in entries where Self.matches(entry.segments, segments) {
            found = true
            methods.append(contentsOf: entry.methods.filter { !methods.contains($0) })
        }
        return found ? methods.sorted { $0.rawValue < $1.rawValue } : nil
    }

    private static func matches(_ pattern: [Substring], _ segments: [Substring]) -> Bool {
        guard pattern.count == segments.count else { return false }
        return zip(pattern, segments).allSatisfy { $0.first == ":" || $0 == $1 }
    }
}
