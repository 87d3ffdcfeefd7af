import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Synchronization

/// Everything the routes share: storage, idempotency, faults, references and observability.
final class DevServerState: Sendable {
    let configuration: DevServerConfiguration
    let store: DevServerStore
    let inFlight = InFlightKeys()
    let faults: FaultInjector
    let observatory: Observatory
    let references: Mutex<ReferenceIDs>
    /// Idempotency keys are kept per credential; the credential is stored as a hash, never as the token.
    let credential: String
    /// `Bearer TOKEN` as accepted now, and how many `/api` requests were authorized with it
    /// (for ``DevServerConfiguration/tokenRotation``).
    private let accepted: Mutex<(authorization: [UInt8], requests: Int)>
    /// `Bearer TOKEN` of the configured token: `/admin`'s, and `/api`'s unless rotated.
    private let originalAuthorization: [UInt8]

    /// Room for the multipart framing and the text fields around an image at the size limit.
    static let multipartAllowance = 64 * 1024

    init(configuration: DevServerConfiguration) throws {
        self.configuration = configuration
        store = try DevServerStore(
            path: configuration.databasePath, retentionSeconds: configuration.idempotencyRetentionSeconds)
        faults = FaultInjector(configuration.faults)
        observatory = Observatory(capacity: configuration.requestLogCapacity)
        references = Mutex(configuration.references)
        credential = sha256Hex(Array(configuration.token.utf8))
        originalAuthorization = Array("Bearer \(configuration.token)".utf8)
        accepted = Mutex((originalAuthorization, 0))
    }

    /// 401 for a missing or malformed `Authorization: Bearer …`, 403 for a wrong token.
    func authorize(_ request: Request) throws(APIError) {
        guard let header = request.headers[.authorization] else {
            throw APIError(
                status: .unauthorized, code: .unauthorized, message: "missing Authorization: Bearer token", field: nil)
        }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer", !parts[1].trimmingSpaces.isEmpty else {
            throw APIError(
                status: .unauthorized, code: .unauthorized,
                message: "malformed Authorization header (expected Bearer TOKEN)", field: nil)
        }
        let presented = Array("Bearer \(parts[1].trimmingSpaces)".utf8)
        let expectedAuthorization: [UInt8]
        if let rotation = configuration.tokenRotation, request.uri.path.hasPrefix("/api/") {
            expectedAuthorization = accepted.withLock { accepted in
                // The account's token is replaced once the old one has served its requests (the
                // identity, and so the idempotency keys, stay the account's).
                if accepted.requests == rotation.afterRequests {
                    rotation.rotatingClient?()
                    accepted.authorization = Array("Bearer \(rotation.newToken)".utf8)
                }
                accepted.requests += 1
                return accepted.authorization
            }
        } else {
            expectedAuthorization = originalAuthorization
        }
        // Compare every byte whatever the first difference, so timing tells nothing.
        var difference = presented.count == expectedAuthorization.count ? 0 : 1
        for index in presented.indices where index < expectedAuthorization.count {
            difference |= Int(presented[index] ^ expectedAuthorization[index])
        }
        guard difference == 0 else {
            throw APIError(status: .forbidden, code: .forbidden, message: "the token is not accepted", field: nil)
        }
    }

    // MARK: Creating records

    /// What a create request carries besides its body: where the record goes and how to read it.
    enum Payload {
        case json(RecordSchema)
        case image
    }

    /// The whole life of a POST that creates a record: bounded body, idempotency (claim, replay,
    /// reuse; skipped with `ignoreIdempotencyKeys`), injected latency, validation, one transaction for the record and its key, and
    /// the injected drop after commit.
    func create(
        _ request: Request, context: DevServerRequestContext, kind: RecordKind, parent: DevServerStore.Parent
    ) async throws -> Response {
        // A backend without keys does not read the header at all (`ignoreIdempotencyKeys`).
        let key = configuration.ignoreIdempotencyKeys ? nil : try Self.idempotencyKey(request)
        let payload: Payload = kind.schema.map(Payload.json) ?? .image
        let limit: Int
        switch payload {
        case .json:
            try Self.requireJSONContentType(request)
            limit = configuration.maxJSONBytes
        case .image:
            limit = configuration.maxImageBytes + Self.multipartAllowance
        }
        var fingerprint = key.map { _ in RequestFingerprint(method: request.method.rawValue, path: request.uri.path) }
        let body = try await BoundedBody.collect(request, limit: limit, fingerprint: &fingerprint)

        guard let key, let fingerprint else {
            try await injectLatency(context)
            return try await commit(
                request, context: context, kind: kind, parent: parent, payload: payload, body: body, key: nil)
        }
        let fingerprintText = fingerprint.finalize()
        return try await inFlight.withClaim(InFlightKeys.Key(credential: credential, key: key)) {
            try await injectLatency(context)
            let keyToStore = DevServerStore.KeyToStore(credential: credential, key: key, fingerprint: fingerprintText)
            return try await commit(
                request, context: context, kind: kind, parent: parent, payload: payload, body: body, key: keyToStore)
        }
    }

    /// Stores the record (or finds the key already stored) and answers: 201, a replay, or the
    /// dropped connection of `--drop-after-commit-rate`.
    private func commit(
        _ request: Request, context: DevServerRequestContext, kind: RecordKind, parent: DevServerStore.Parent,
        payload: Payload, body: ByteBuffer, key: DevServerStore.KeyToStore?
    ) async throws -> Response {
        let prepare: @Sendable () throws -> DevServerStore.PreparedRecord
        switch payload {
        case .json(let schema):
            // Validated inside the transaction, after the key lookup: a replay is answered
            // from the key, and a reused key is told so, whatever the body holds.
            let references = references.withLock { $0 }
            prepare = {
                let value: JSONValue
                do {
                    value = try body.withUnsafeReadableBytes { try JSONValue.parse($0) }
                } catch let error as JSONParseError {
                    throw APIError.validation("body", error.description)
                }
                let record = try schema.validate(value, references: references)
                return DevServerStore.PreparedRecord(clientId: record.clientId, fieldsJSON: record.fieldsJSON)
            }
        case .image:
            // Parsed and hashed before the transaction: megabytes must not hold the database.
            let boundary = try MultipartImageParser.boundary(contentType: request.headers[.contentType])
            let maxImageBytes = configuration.maxImageBytes
            let image = try body.withUnsafeReadableBytes {
                try MultipartImageParser.parse($0, boundary: boundary, maxImageBytes: maxImageBytes)
            }
            prepare = { DevServerStore.PreparedRecord(clientId: image.clientId, fieldsJSON: image.fieldsJSON) }
        }
        let outcome = try await store.createOrReplay(kind: kind, parent: parent, key: key, prepare: prepare)
        switch outcome {
        case .stored(let stored):
            guard stored.fingerprint == key?.fingerprint else {
                throw APIError(
                    status: .unprocessableContent, code: .idempotencyKeyReused,
                    message: "this Idempotency-Key was used for a different request", field: "Idempotency-Key")
            }
            return Self.jsonResponse(
                status: HTTPResponse.Status(code: stored.status),
                body: configuration.answerCreatesWithoutClientID ? Self.withoutClientID(stored.body) : stored.body,
                headers: [.idempotentReplayed: "true"])
        case .created(let id, let clientId):
            observatory.recordCreated(kind)
            if context.faults.dropAfterCommit {
                // The dangerous window on purpose: the record and its key are committed, and the
                // client sees its connection close with no status line.
                context.logger.debug("dropping the connection after commit", metadata: ["record.id": "\(id)"])
                try? await context.channel.close().get()  // the fault is the close; already closed is as good
                throw ConnectionDroppedAfterCommit()
            }
            // `--answer-creates-without-client-id`: a backend (or a proxy's page) whose 201 names
            // no record; a client must not take it for a confirmed create.
            let body =
                configuration.answerCreatesWithoutClientID
                ? #"{"id":\#(id)}"# : DevServerStore.createdBody(id: id, clientId: clientId)
            return Self.jsonResponse(status: .created, body: body)
        }
    }

    /// A stored 201 body (``DevServerStore/createdBody(id:clientId:)``) without its `clientId`.
    static func withoutClientID(_ body: String) -> String {
        // `{"id":N,"clientId":"UUID"}`: everything from the comma on, replaced by the closing brace.
        guard let comma = body.firstIndex(of: ",") else { return body }
        return String(body[..<comma]) + "}"
    }

    private func injectLatency(_ context: DevServerRequestContext) async throws {
        let milliseconds = context.faults.latencyMilliseconds
        guard milliseconds > 0 else { return }
        try await Task.sleep(for: .milliseconds(milliseconds))
    }

    /// The `Idempotency-Key` header, if sent: 1 to 255 characters, or 422.
    static func idempotencyKey(_ request: Request) throws(APIError) -> String? {
        guard let key = request.headers[.idempotencyKey] else { return nil }
        guard (1...255).contains(key.count) else {
            throw APIError.validation("Idempotency-Key", "must be 1 to 255 characters (was \(key.count))")
        }
        return key
    }

    /// JSON routes take `application/json` (any parameters) or no Content-Type at all; else 415.
    static func requireJSONContentType(_ request: Request) throws(APIError) {
        guard let contentType = request.headers[.contentType] else { return }
        let mediaType =
            contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingSpaces.lowercased() } ?? ""
        guard mediaType == "application/json" else {
            throw APIError.unsupportedMediaType(
                "the body must be application/json (was \(contentType))", field: "Content-Type")
        }
    }

    static func jsonResponse(status: HTTPResponse.Status, body: String, headers: HTTPFields = [:]) -> Response {
        var fields = headers
        fields[.contentType] = "application/json"
        return Response(status: status, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(string: body)))
    }
}
