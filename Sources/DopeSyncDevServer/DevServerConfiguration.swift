/// Everything `dopesync-devserver` can be told, as one value.
///
/// The executable fills it from its command line; tests build it directly and start the
/// server in-process with ``DevServer/run(onListening:)`` or `withDevServer` (DopeSyncTestSupport).
public struct DevServerConfiguration: Sendable {
    /// Interface to bind. `--host`, default `127.0.0.1`.
    public var host: String = "127.0.0.1"
    /// Port to bind; `0` picks a free one, reported through `onListening`. `--port`, default 8080.
    public var port: Int = 8080
    /// SQLite file holding records and idempotency keys; `nil` keeps everything in memory
    /// (gone when the server stops). `--db`.
    public var databasePath: String? = nil
    /// The one bearer token accepted on `/api` and `/admin`.
    /// `--token`, else the environment variable `DOPESYNC_DEVSERVER_TOKEN`, else `dev-token`.
    public var token: String = "dev-token"
    /// Reference ids the server knows; any other id is refused with 422 `unknown_reference`.
    public var references: ReferenceIDs = ReferenceIDs()
    /// An image file part larger than this is refused with 413. `--max-image-bytes`, default 64 MiB.
    public var maxImageBytes: Int = 64 * 1024 * 1024
    /// A JSON request body larger than this is refused with 413. `--max-json-bytes`, default 1 MiB.
    public var maxJSONBytes: Int = 1024 * 1024
    /// Failures to inject into `/api` POSTs (never into health or admin routes).
    public var faults: FaultConfiguration = FaultConfiguration()
    /// Accept `Idempotency-Key` and ignore it, as a backend that never implemented keys would:
    /// every POST is processed as new (a resend creates a second record), with no replay, no 409
    /// while a twin is in flight and no 422 for a reused or malformed key. The request log of
    /// `GET /admin/requests` still shows the key sent. `--ignore-idempotency-keys`, default off.
    public var ignoreIdempotencyKeys: Bool = false
    /// Replace the accepted `/api` token after this many `/api` requests, as a secret manager
    /// rotating the account's token would: from then on only `newToken` is accepted there (403 for
    /// the old one). `/admin` keeps ``token``: it is the dev server's own.
    public var tokenRotation: TokenRotation? = nil
    /// Answer every `/api` POST with this redirect status (301, 302, 303, 307 or 308) and a
    /// `Location` to ``redirectTargetPath``, where any request gets `200 {"id": 424242}`: a proxy
    /// or load balancer that redirects, and a page that looks like a create. Nothing is stored.
    /// `--redirect STATUS`, default none.
    public var redirectStatus: Int? = nil
    /// Answer a new record's 201 with `{"id": N}` alone, without the `clientId` docs/api.yaml requires
    /// (replays keep the full body). `--answer-creates-without-client-id`, default off.
    public var answerCreatesWithoutClientID: Bool = false
    /// Where ``redirectStatus`` points.
    public static let redirectTargetPath = "/elsewhere"
    /// The redirects `--redirect` can answer.
    public static let redirectStatuses: Set<Int> = [301, 302, 303, 307, 308]
    /// Whether `GET /api/sessions?clientId=` and `GET /api/sessions/{sessionId}` are served.
    /// Off, both answer ``lookupsStatus`` as a backend without them would, and other methods on
    /// those paths are judged as if the GET routes did not exist; POSTs and the admin routes
    /// (`GET /admin/sessions…` included) work as before. `--no-lookups` turns it off.
    public var lookups: Bool = true
    /// Whether `GET /api/rifles`, `/api/ammunition` and `/api/locations` are served (from
    /// ``references``, with ETags). Off, they answer 404 as an older API without them would.
    /// `--no-reference-lists` turns it off.
    public var referenceLists: Bool = true
    /// Whether the ammunition list names each item's `lots`. Off, it names none, as an API from
    /// before lots whose creates still judge each `ammoLotId`. `--no-lots-in-list` turns it off.
    public var lotsInList: Bool = true
    /// A web application firewall in front of the API: an `/api` POST whose body holds these
    /// bytes is answered 403 with an HTML page, before the token is looked at. `--forbid-body`.
    public var forbiddenBodyPattern: String? = nil
    /// An API or proxy that stalls mid-answer: answers to requests whose path starts with
    /// ``SlowBody/pathPrefix`` (and of ``SlowBody/method``, if named) send their head at once,
    /// then their body one byte each ``SlowBody/byteInterval``.
    /// `--slow-body '[METHOD ]PATH' --slow-body-interval SECONDS`.
    public var slowBody: SlowBody? = nil
    /// What the two lookups answer when ``lookups`` is off. `--lookups-status 404|405`, default 404.
    public var lookupsStatus: MissingLookupsStatus = .notFound
    /// How long idempotency keys are kept. The API promises at least 7 days.
    public var idempotencyRetentionSeconds: Int = 7 * 24 * 3600
    /// How many recent requests `GET /admin/requests` remembers (a ring buffer).
    public var requestLogCapacity: Int = 10_000
    /// Called with each request's method and path as it arrives, before anything else: a test
    /// waits for a run's first request with it, where it would otherwise poll the request log.
    public var onRequest: (@Sendable (_ method: String, _ path: String) -> Void)? = nil
    /// Serve HTTPS instead of HTTP. `--tls-cert FILE --tls-key FILE` (`--http2` for h2).
    public var tls: DevServerTLS? = nil

    public init() {}

    /// See ``DevServerConfiguration/slowBody``.
    public struct SlowBody: Sendable {
        /// Any method when nil.
        public var method: String?
        public var pathPrefix: String
        public var byteInterval: Duration

        public init(method: String? = nil, pathPrefix: String, byteInterval: Duration) {
            self.method = method
            self.pathPrefix = pathPrefix
            self.byteInterval = byteInterval
        }

        /// `POST /api/sessions` or `/api/health`.
        public init(_ text: String, byteInterval: Duration) {
            let parts = text.split(separator: " ", maxSplits: 1).map(String.init)
            self.init(
                method: parts.count == 2 ? parts[0].uppercased() : nil, pathPrefix: parts.last ?? text,
                byteInterval: byteInterval)
        }

        func applies(method: String, path: String) -> Bool {
            (self.method == nil || self.method == method) && path.hasPrefix(pathPrefix)
        }
    }

    /// `http` or `https`, for the `listening on` line and for clients built from it.
    public var scheme: String { tls == nil ? "http" : "https" }
}

/// When the dev server starts accepting another token (``DevServerConfiguration/tokenRotation``).
public struct TokenRotation: Sendable {
    public var afterRequests: Int
    public var newToken: String
    /// Called at the moment of the switch, before any request is judged by the new token: a test
    /// rotates the client's side there (its token file, its vault), as a secret manager does both.
    public var rotatingClient: (@Sendable () -> Void)?
    public init(afterRequests: Int, newToken: String, rotatingClient: (@Sendable () -> Void)? = nil) {
        self.afterRequests = afterRequests
        self.newToken = newToken
        self.rotatingClient = rotatingClient
    }
}

/// The certificate the dev server presents, and whether it offers HTTP/2.
public struct DevServerTLS: Sendable, Equatable {
    /// PEM file holding the server's certificate, then any intermediates.
    public var certificateChainPath: String
    /// PEM file holding the certificate's private key.
    public var privateKeyPath: String
    /// Offer `h2` next to `http/1.1` through ALPN; a client that asks for h2 gets it.
    public var http2: Bool

    public init(certificateChainPath: String, privateKeyPath: String, http2: Bool = false) {
        self.certificateChainPath = certificateChainPath
        self.privateKeyPath = privateKeyPath
        self.http2 = http2
    }
}

/// The answer of a lookup on a server without lookups (``DevServerConfiguration/lookups`` off).
public enum MissingLookupsStatus: Int, Sendable, Equatable, CaseIterable {
    /// 404 `not_found`, as a server whose router answers 404 for any route it lacks.
    case notFound = 404
    /// 405 `method_not_allowed` with `Allow` listing what the path still takes: `POST` on
    /// `/api/sessions`, nothing (an empty `Allow`) on `/api/sessions/{sessionId}`.
    case methodNotAllowed = 405
}

/// Faults injected into `/api` POSTs, reproducible with a seed.
///
/// Each POST draws its fate from one seeded generator in a fixed order (fail, rate limit,
/// drop, latency), so the same seed and the same sequence of requests give the same faults.
public struct FaultConfiguration: Sendable, Equatable {
    /// Probability of answering 500 or 503 before doing anything. `--fail-rate`.
    public var failRate: Double = 0
    /// Probability of answering 429 with `Retry-After` before doing anything. `--rate-limit-rate`.
    public var rateLimitRate: Double = 0
    /// Probability of committing the record and its idempotency key, then closing the
    /// connection without a response (the client sees a lost connection). `--drop-after-commit-rate`.
    public var dropAfterCommitRate: Double = 0
    /// Extra delay, in milliseconds, drawn uniformly from this range, while the request holds
    /// its idempotency key (so a concurrent twin sees 409). `--latency-ms A-B`.
    public var latencyMilliseconds: ClosedRange<Int> = 0...0
    /// The `Retry-After` value, in seconds, sent with injected 429 and 503 answers.
    public var retryAfterSeconds: Int = 1
    /// Seed of the generator; the same seed gives the same faults. `--seed`.
    public var seed: UInt64 = 0

    public init() {}

    /// Whether any fault at all can happen (the fast path skips the generator otherwise).
    var isActive: Bool {
        failRate > 0 || rateLimitRate > 0 || dropAfterCommitRate > 0 || latencyMilliseconds.upperBound > 0
    }
}

/// The ids of the records a request may refer to, by kind.
public struct ReferenceIDs: Sendable, Equatable {
    /// `rifleSetupId` of a session. `--rifles`, default 1-100.
    public var rifleSetups: IDSet = IDSet(1...100)
    /// `locationId` of a session. `--locations`, default 1-50.
    public var locations: IDSet = IDSet(1...50)
    /// `ammunitionId` of DOPE entries, chrono sessions and groups. `--ammunition`, default 1-500.
    public var ammunition: IDSet = IDSet(1...500)
    /// `ammoLotId` of chrono sessions. `--ammo-lots`, default 1-500.
    public var ammoLots: IDSet = IDSet(1...500)

    public init() {}
}

/// A set of positive ids kept as ranges, so `1-1000000` costs nothing.
public struct IDSet: Sendable, Equatable, CustomStringConvertible {
    public private(set) var ranges: [ClosedRange<Int>]

    public init(_ ranges: ClosedRange<Int>...) { self.ranges = ranges }
    public init(ranges: [ClosedRange<Int>]) { self.ranges = ranges }

    /// Parses `1-100`, `1,2,3`, `1-10,20,30-40`; an empty string is the empty set.
    public init(parsing text: String) throws(DevServerConfigurationError) {
        var ranges: [ClosedRange<Int>] = []
        for item in text.split(separator: ",", omittingEmptySubsequences: true) {
            ranges.append(try Self.parseRange(item.trimmingSpaces, whole: text))
        }
        self.ranges = ranges
    }

    static func parseRange(_ item: Substring, whole: String) throws(DevServerConfigurationError) -> ClosedRange<Int> {
        let bounds = item.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard let low = Int(bounds[0]), low >= 1 else {
            throw DevServerConfigurationError("'\(item)' in '\(whole)' is not an id (an integer >= 1) or a range A-B")
        }
        guard bounds.count == 2 else { return low...low }
        guard let high = Int(bounds[1]), high >= low else {
            throw DevServerConfigurationError("'\(item)' in '\(whole)' is not a range A-B with 1 <= A <= B")
        }
        return low...high
    }

    public func contains(_ id: Int) -> Bool { ranges.contains { $0.contains(id) } }

    public mutating func formUnion(_ other: IDSet) { ranges.append(contentsOf: other.ranges) }

    public var description: String {
        ranges.map { $0.lowerBound == $0.upperBound ? "\($0.lowerBound)" : "\($0.lowerBound)-\($0.upperBound)" }
            .joined(separator: ",")
    }
}

/// A configuration value that cannot be used, with a message naming it.
public struct DevServerConfigurationError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension ClosedRange where Bound == Int {
    /// Parses `A-B` or a single `A` (non-negative), as `--latency-ms` takes it.
    public static func parsingMilliseconds(_ text: String) throws(DevServerConfigurationError) -> ClosedRange<Int> {
        let bounds = text.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard let low = Int(bounds[0].trimmingSpaces), low >= 0 else {
            throw DevServerConfigurationError("'\(text)' is not a duration in milliseconds or a range A-B")
        }
        guard bounds.count == 2 else { return low...low }
        guard let high = Int(bounds[1].trimmingSpaces), high >= low else {
            throw DevServerConfigurationError("'\(text)' is not a range A-B with 0 <= A <= B")
        }
        return low...high
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var text = self
        while text.first == " " { text = text.dropFirst() }
        while text.last == " " { text = text.dropLast() }
        return text
    }
}
