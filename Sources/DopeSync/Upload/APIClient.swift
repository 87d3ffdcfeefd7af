import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// How the API answered one step, classified the way the failure table needs it (docs/api.md, "What each answer does").
public enum StepResponse: Sendable, Equatable {
    /// 2xx with the new (or replayed) record's id.
    case created(id: Int64, replayed: Bool)
    /// 400, 413, 415, 422, 404: the request can never succeed as sent. `field`: the request's
    /// field the API names (`ammunitionId`), if it names one.
    case rejected(status: Int, code: String?, message: String, field: String?)
    /// 401 or 403 (or the proxy's 407): the credential is wrong, not the request.
    case unauthorized(status: Int, message: String)
    /// The API's TLS certificate could not be verified (an unknown CA, another host's name,
    /// expired) or TLS could not be agreed at all: nothing was sent, and trying again changes
    /// nothing until the certificate or `--ca-file` does.
    case notTrusted(message: String)
    /// Timeout, lost connection, 408, 409, 425, 429, 5xx: try again later.
    case retryable(status: Int?, retryAfter: Duration?, message: String)
    /// The image could not be read back from the archive as validation saw it (the bundle changed
    /// or broke since): nothing, or not all of its body, was sent. Not the API's answer, so never
    /// retried and never counted against the API.
    case imageUnreadable(message: String)
    /// The image could not be read back for a reason of this machine, not of the bundle (an I/O
    /// error, no file descriptor left): nothing whole was sent; the bundle is tried again later
    /// and not blamed.
    case bundleReadFailed(message: String)
    /// The answer says the URL does not lead to the API: a redirect (never followed), HTML where
    /// JSON is due, or (judged by the upload, which knows the step) a 404 from the session
    /// collection. The configuration's fault, not the bundle's: the run stops, exit 78.
    case misdirected(message: String)
}

/// Sends upload steps to the TrueDope API over one pooled HTTP client (connections reused).
public struct APIClient: Sendable {
    public struct Timeouts: Sendable {
        public var connect: Duration = .seconds(5)
        /// A JSON step, from sending to the end of the answer.
        public var request: Duration = .seconds(30)
        /// An image adds time by its size, at no less than this rate.
        public var minimumBytesPerSecond: Int64 = 256 * 1024
        public init() {}
    }

    /// How the client reaches the API beyond its URL: extra trusted roots, a proxy, a rate cap.
    public struct Network: Sendable {
        /// PEM file of CA certificates trusted in addition to the system's (`--ca-file`).
        public var caFile: String?
        /// The proxy requests go through (CONNECT), if any (`--proxy`, `https_proxy`, …).
        public var proxy: HTTPProxy?
        /// The cap on the upload rate of all requests together (`--max-rate`), if any.
        public var rateLimit: UploadRateLimit?
        public init(caFile: String? = nil, proxy: HTTPProxy? = nil, rateLimit: UploadRateLimit? = nil) {
            self.caFile = caFile
            self.proxy = proxy
            self.rateLimit = rateLimit
        }
    }

    let http: HTTPClient
    let baseURL: String
    /// The token each request sends, renewed after a refusal (``Credential``).
    let credential: Credential
    let timeouts: Timeouts
    let network: Network
    /// The slowest rate a body can expect to be sent at: the timeouts' floor, or the request's
    /// share of the cap when every connection uploads at once. Deadlines grow by it.
    let slowestBytesPerSecond: Int64
    /// The run's stop: once its grace is over, requests still in flight are cancelled.
    let stop: StopRequest
    /// Whether the server of the URL speaks the other scheme instead, asked once (``SchemeProbe``).
    let schemeProbe = SchemeProbe()
    var rateLimit: UploadRateLimit? { network.rateLimit }
    var proxy: HTTPProxy? { network.proxy }

    /// Runs `body` with a client whose pool holds up to `connections` connections on the loops
    /// of `eventLoopGroup`, and shuts it down afterwards.
    public static func with<T: Sendable>(
        baseURL: String,
        credential: Credential,
        connections: Int,
        timeouts: Timeouts = Timeouts(),
        network: Network = Network(),
        stop: StopRequest = StopRequest(),
        eventLoopGroup: any EventLoopGroup = HTTPClient.defaultEventLoopGroup,
        _ body: (APIClient) async throws -> T
    ) async throws -> T {
        var configuration = HTTPClient.Configuration()
        configuration.timeout = .init(connect: .init(timeouts.connect), read: .init(timeouts.request))
        configuration.connectionPool = .init(
            idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: max(connections, 1))
        configuration.decompression = .disabled
        // Never follow a redirect: a proxy or server that answers a POST with 3xx would otherwise
        // get the request again somewhere else, and whatever answers there would be taken for
        // the API (a "created" from a login page). A 3xx is the configuration's fault (exit 78).
        configuration.redirectConfiguration = .disallow
        // No spans: the worker bootstraps no tracer, and the default (a no-op one) still built
        // each request's attributes, parsing its URL again (BENCHMARKS.md, "No tracing spans").
        configuration.tracing.tracer = nil
        if let caFile = network.caFile {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.additionalTrustRoots = [.file(caFile)]
            configuration.tlsConfiguration = tls
        }
        if let proxy = network.proxy {
            let authorization = proxy.username.map {
                HTTPClient.Authorization.basic(username: $0, password: proxy.password ?? "")
            }
            configuration.proxy = .server(host: proxy.host, port: proxy.port, authorization: authorization)
        }
        let share = network.rateLimit.map { $0.bytesPerSecond / Int64(max(connections, 1)) }
        let slowest = max(min(timeouts.minimumBytesPerSecond, share ?? .max), 1)
        return try await HTTPClient.withHTTPClient(eventLoopGroup: eventLoopGroup, configuration: configuration) {
            http in
            let client = APIClient(
                http: http, baseURL: baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL,
                credential: credential, timeouts: timeouts, network: network, slowestBytesPerSecond: slowest,
                stop: stop
            )
            return try await body(client)
        }
    }

    /// How long a request may take, from sending to the end of the answer: the JSON step's
    /// timeout, plus the body's length at the slowest rate it can expect (under `--max-rate`,
    /// its share of the cap), so a big image on a capped link never times out while bytes flow.
    func deadline(forBodyOf length: Int64) -> Duration {
        timeouts.request + .milliseconds(length * 1000 / slowestBytesPerSecond)
    }

    /// Sends `request` and reads its whole answer within `limit`, or until the run's stop grace
    /// is over. AsyncHTTPClient's own deadline ends at the answer's head, and its read timeout
    /// restarts with every byte: a server sending one byte every few seconds held a run past
    /// SIGTERM for good.
    func exchange(_ request: HTTPClientRequest, within limit: Duration, upTo maxBytes: Int) async throws -> (
        HTTPClientResponse, ByteBuffer
    ) {
        // The request in a child task, this task waiting beside it for its end, its deadline or
        // the stop's grace: one task a request, not a second one that sleeps (BENCHMARKS.md,
        // 2026-11-28).
        let wait = stop.makeWait()
        return try await withThrowingTaskGroup(of: (HTTPClientResponse, ByteBuffer).self) { group in
            group.addTask {
                defer { wait.end() }
                // The wait is the one deadline: AsyncHTTPClient's own would end at the head.
                let response = try await http.execute(request, deadline: .distantFuture)
                return (response, try await response.body.collect(upTo: maxBytes))
            }
            let wake = await stop.sleep(wait, for: limit)
            if wake != .ended { group.cancelAll() }
            // The request always ends, cancelled or not: its answer, or why there is none.
            guard let answer = await group.nextResult() else { preconditionFailure("the request is the group's child") }
            switch wake {
            case .ended, .cancelled: return try answer.get()
            case .timeUp: throw HTTPClientError.deadlineExceeded
            case .graceOver: throw StoppedInFlight(grace: stop.grace)
            case .stopRequested: preconditionFailure("a request's wait ends at the grace, not the request")
            }
        }
    }

    /// Sends one step and classifies the answer. Never throws: every failure is a response kind.
    /// Returns the bytes sent alongside, for the run's counters. An image kept from validation
    /// (small) is sent from memory; others stream from the archive.
    /// `claimHeld`, for a claim that can run out, is asked as each part of the body is ready, once
    /// the request's head has gone: once it says no, the body stops and the request fails as a
    /// transport would.
    public func send(
        _ step: UploadStep, path: String, images: ArchiveImages?,
        claimHeld: (@Sendable () -> Bool)? = nil
    ) async -> (StepResponse, bytesSent: Int64) {
        await send(step, path: path, bytesInMemory: { $0.bytes }, archive: images, claimHeld: claimHeld)
    }

    /// The same request with every image's bytes already in memory: for measuring the API's raw
    /// capacity without the archive (`dopesync-bench raw-capacity`).
    public func sendPrepared(_ step: UploadStep, path: String, images: [String: [UInt8]]) async -> StepResponse {
        await send(step, path: path, bytesInMemory: { images[$0.fileName] }, archive: nil, claimHeld: nil).0
    }

    private func send(
        _ step: UploadStep, path: String, bytesInMemory: (BundleImage) -> [UInt8]?, archive: ArchiveImages?,
        claimHeld: (@Sendable () -> Bool)?
    ) async -> (StepResponse, bytesSent: Int64) {
        var request = makeRequest(step, path: path)
        switch step.payload {
        case .json(let bytes):
            request.body = body(ByteBuffer(bytes: bytes), claimHeld: claimHeld)
            return await execute(request, clientID: step.clientID, length: Int64(bytes.count))
        case .image(let image, let role, let groupID):
            let framing = MultipartFraming(
                idempotencyKey: step.idempotencyKey, groupID: groupID, role: role, image: image)
            request.headers.add(name: "Content-Type", value: framing.contentType)
            let length = framing.contentLength(imageSize: image.size)
            if let bytes = bytesInMemory(image) {
                // The bytes validation kept, which chose the boundary knowing them (`MultipartFraming`):
                // nothing to search again. One buffer sized up front: one copy of the image, straight into the body.
                var body = ByteBuffer()
                body.reserveCapacity(Int(length))
                body.writeBytes(framing.head)
                body.writeBytes(bytes)
                body.writeBytes(framing.tail)
                request.body = self.body(body, claimHeld: claimHeld)
                return await execute(request, clientID: step.clientID, length: length)
            }
            guard let archive else { preconditionFailure("an image step needs its bytes or the bundle's entry reader") }
            do {
                let reading = try await archive.open(image)
                let parts = MultipartBody(framing: framing, image: image, images: archive, reading: reading)
                request.body = streamed(parts, length: length, claimHeld: claimHeld)
            } catch {
                return (Self.unreadable(error), 0)
            }
            return await execute(request, clientID: step.clientID, length: length)
        }
    }

    /// A body in memory: as it is when nothing stands between it and the connection, else as
    /// one part of a stream (``streamed(_:length:claimHeld:)``).
    private func body(_ bytes: ByteBuffer, claimHeld: (@Sendable () -> Bool)?) -> HTTPClientRequest.Body {
        guard rateLimit != nil || claimHeld != nil else { return .bytes(bytes) }
        return streamed(OneBuffer(buffer: bytes), length: Int64(bytes.readableBytes), claimHeld: claimHeld)
    }

    /// A body in parts: through the rate cap, if any, then behind the claim's fence
    /// (``fenced(_:length:claimHeld:)``), which so asks after the cap's wait.
    private func streamed<Parts: AsyncSequence & Sendable>(
        _ parts: Parts, length: Int64, claimHeld: (@Sendable () -> Bool)?
    ) -> HTTPClientRequest.Body where Parts.Element == ByteBuffer {
        guard let rateLimit else { return fenced(parts, length: length, claimHeld: claimHeld) }
        return fenced(RateLimitedBody(base: parts, limit: rateLimit), length: length, claimHeld: claimHeld)
    }

    /// `parts` behind the claim's fence when the claim can run out (``ClaimFencedBody``), asked
    /// as each part is ready: after the archive's read and any wait before it.
    private func fenced<Parts: AsyncSequence & Sendable>(
        _ parts: Parts, length: Int64, claimHeld: (@Sendable () -> Bool)?
    ) -> HTTPClientRequest.Body where Parts.Element == ByteBuffer {
        guard let claimHeld else { return .stream(parts, length: .known(length)) }
        return .stream(ClaimFencedBody(base: parts, claimHeld: claimHeld), length: .known(length))
    }

    private func makeRequest(_ step: UploadStep, path: String) -> HTTPClientRequest {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(credential.current)")
        request.headers.add(name: "Idempotency-Key", value: step.idempotencyKey)
        request.headers.add(name: "User-Agent", value: "dopesync/\(DopeSyncInfo.version)")
        if case .json = step.payload { request.headers.add(name: "Content-Type", value: "application/json") }
        return request
    }

    /// Sends and classifies per the failure table (docs/api.md). The deadline grows with the body.
    private func execute(_ request: HTTPClientRequest, clientID: String, length: Int64) async -> (
        StepResponse, bytesSent: Int64
    ) {
        do {
            let (response, body) = try await exchange(request, within: deadline(forBodyOf: length), upTo: 1 << 20)
            let status = Int(response.status.code)
            if let misdirected = Self.misdirection(response, url: request.url) {
                return (.misdirected(message: misdirected), length)
            }
            let answer = Self.decodeAnswer(body)
            if (200..<300).contains(status) {
                // Only what names the record sent is a create: anything else (a page of a proxy,
                // another record's answer) is recorded nowhere, and the step's outcome is unknown.
                guard let id = answer.id, id > 0, answer.clientID == clientID else {
                    let said = answer.id.map { "id \($0) for clientId \(answer.clientID.map(Self.quoted) ?? "(none)")" }
                    return (
                        .retryable(
                            status: status, retryAfter: nil,
                            message: "a \(status) answer that does not confirm the create of clientId \(clientID) "
                                + "(it says \(said ?? "no id"))"), length
                    )
                }
                return (
                    .created(id: id, replayed: response.headers.first(name: "Idempotent-Replayed") == "true"), length
                )
            }
            return (Self.refusal(status: status, headers: response.headers, answer: answer), length)
        } catch let error as BundleError {
            // The image's body stopped itself (AsyncHTTPClient hands its error back as it is).
            return (Self.unreadable(error), length)
        } catch {
            return (await classify(error), length)
        }
    }

    /// An image that could not be read back from the archive: the disk's or the system's fault
    /// (`io_error`: EIO, EMFILE), or bytes that are not the ones validated (the bundle's).
    static func unreadable(_ error: any Error) -> StepResponse {
        if let error = error as? BundleError, error.code == .io {
            return .bundleReadFailed(message: error.description)
        }
        return .imageUnreadable(message: "\(error)")
    }

    /// Why this answer cannot be the API's, if it cannot: a redirect, or an HTML page. Names the
    /// status, the URL asked (credentials masked) and where it pointed.
    static func misdirection(_ response: HTTPClientResponse, url: String) -> String? {
        let status = Int(response.status.code)
        if (300..<400).contains(status) {
            let location = response.headers.first(name: "Location").map { " to \(MaskedURL.string($0))" } ?? ""
            return "the API answered \(status), a redirect\(location), for \(MaskedURL.string(url)): redirects are "
                + "never followed; point --api (api: in the job file) at the API itself"
        }
        // HTML says "not the API" only where the API's own answer was due: a success, or "no such
        // route". A proxy's HTML 502 or 413 is an outage or a refusal, judged by its status.
        // (Read on every answer: the message is built only for a misdirected one.)
        let apiAnswerDue = (200..<300).contains(status) || status == 404 || status == 405
        guard apiAnswerDue, let type = response.headers.first(name: "Content-Type")?.lowercased() else { return nil }
        if type.hasPrefix("text/html") || type.hasPrefix("application/xhtml") {
            return "the API answered \(status) with an HTML page for \(MaskedURL.string(url)), where JSON is due: "
                + "this URL does not lead to the API (a proxy's or web server's page?)"
        }
        return nil
    }

    /// A status other than 2xx, as the failure table classifies it (docs/api.md): refused credentials,
    /// retryable (with `Retry-After`), or rejected for good.
    static func refusal(status: Int, headers: HTTPHeaders, answer: Answer) -> StepResponse {
        let message = answer.message ?? "HTTP \(status)"
        switch status {
        case 401, 403:
            return .unauthorized(status: status, message: message)
        case 408, 409, 425, 429, 500...599:
            let retryAfter = headers.first(name: "Retry-After").flatMap(parseRetryAfter)
            return .retryable(status: status, retryAfter: retryAfter, message: message)
        default:
            return .rejected(status: status, code: answer.code, message: message, field: answer.field)
        }
    }

    static func quoted(_ text: String) -> String { "\"\(text)\"" }

    /// The API's `{"id": …}` or `{"error": {"code", "message", "field"}}`.
    /// A body that is not JSON, or not one of those, says nothing: nil for each (the status speaks).
    static func decodeAnswer(_ buffer: ByteBuffer) -> Answer {
        guard let object = (try? JSONValue.parse(buffer.readableBytesView))?.objectValue else { return Answer() }
        if let id = object["id"]?.numberValue?.intValue {
            return Answer(id: Int64(id), clientID: object["clientId"]?.stringValue)
        }
        guard let error = object["error"]?.objectValue else { return Answer() }
        let code = error["code"]?.stringValue
        let field = error["field"]?.stringValue
        var message = error["message"]?.stringValue ?? code ?? "error"
        if let field { message += " (field \(field))" }
        if let code { message = "\(code): \(message)" }
        return Answer(code: code, message: message, field: field)
    }

    /// What an answer's body says, as far as it can be read.
    struct Answer {
        var id: Int64? = nil
        var clientID: String? = nil
        var code: String? = nil
        var message: String? = nil
        var field: String? = nil
    }

    /// `Retry-After` in seconds or as an HTTP date.
    static func parseRetryAfter(_ value: String) -> Duration? {
        if let seconds = Int(value.trimmingCharacters(in: .whitespaces)), seconds >= 0 { return .seconds(seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return .seconds(max(0, Int64(date.timeIntervalSinceNow.rounded(.up))))
    }
}
