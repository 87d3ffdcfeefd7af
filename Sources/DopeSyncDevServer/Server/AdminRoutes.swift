import HTTPTypes
import Hummingbird
import Synchronization

/// Routes for tests and operators, behind the same bearer token as `/api`, never subject to faults.
///
/// - `GET /admin/stats`: `{"requests", "replays", "created": {kind: n}, "byStatus": {"201": n},
///   "faults": {"server_error", "rate_limited", "dropped_after_commit"}, "referenceLists":
///   {"rifles": {"200": n, "304": n}, "ammunition": …, "locations": …}}` since start (or reset).
/// - `GET /admin/requests?since=SEQ&limit=N`: `{"nextSeq": N, "requests": [{"seq", "method",
///   "path", "idempotencyKey", "status", "replayed", "dropped", "fault", "durationMs", "receivedMs"}]}`,
///   oldest first, from a ring buffer of the last `requestLogCapacity` requests.
/// - `POST /admin/reset`: forgets counters and the request log (records stay). 204.
/// - `GET /admin/references`: `{"rifles": "1-100", "locations": …, "ammunition": …, "ammoLots": …}`.
/// - `POST /admin/references`: adds ids, `PUT` replaces the kinds named. Body: any of
///   `rifles`, `locations`, `ammunition`, `ammoLots`, each an array of ids and `"A-B"` ranges or
///   one string like `"1-10,42"`. Answers with the new sets, as GET does.
/// - `GET /admin/faults`, `PUT /admin/faults`: `{"failRate", "rateLimitRate",
///   "dropAfterCommitRate", "latencyMs": "A-B", "retryAfterSeconds", "seed"}`; PUT changes the
///   fields given and restarts the generator from `seed`.
/// - `GET /admin/sessions?clientId=`, `GET /admin/sessions/{sessionId}`: what the two `/api`
///   lookups answer, served even when they are not (`--no-lookups`), so a test can see the trees.
enum AdminRoutes {
    static func routes(state: DevServerState) -> [Route] {
        [
            Route(.get, "/admin/stats") { _, _ in
                DevServerState.jsonResponse(status: .ok, body: state.observatory.statsJSON())
            },
            Route(.get, "/admin/requests") { request, _ in
                let since = request.uri.queryParameters.get("since").flatMap(Int.init) ?? 0
                let limit = request.uri.queryParameters.get("limit").flatMap(Int.init) ?? Int.max
                let next = state.observatory.nextSequence
                let entries = state.observatory.requests(since: since, limit: limit).map(\.jsonText)
                return DevServerState.jsonResponse(
                    status: .ok, body: #"{"nextSeq":\#(next),"requests":[\#(entries.joined(separator: ","))]}"#)
            },
            Route(.post, "/admin/reset") { _, _ in
                state.observatory.reset()
                return Response(status: .noContent)
            },
            Route(.get, "/admin/references") { _, _ in
                DevServerState.jsonResponse(status: .ok, body: referencesJSON(state.references.withLock { $0 }))
            },
            Route(.post, "/admin/references") { request, _ in
                try await changeReferences(request, state: state, replacing: false)
            },
            Route(.put, "/admin/references") { request, _ in
                try await changeReferences(request, state: state, replacing: true)
            },
            Route(.get, "/admin/sessions") { request, _ in try await DevServerRoutes.sessions(request, state: state) },
            Route(.get, "/admin/sessions/:sessionId") { _, context in
                try await DevServerRoutes.sessionTree(context, state: state)
            },
            Route(.get, "/admin/faults") { _, _ in
                DevServerState.jsonResponse(status: .ok, body: faultsJSON(state.faults.configuration))
            },
            Route(.put, "/admin/faults") { request, _ in
                let body = try await adminBody(request)
                var faults = state.faults.configuration
                faults.failRate = try rate(body, "failRate") ?? faults.failRate
                faults.rateLimitRate = try rate(body, "rateLimitRate") ?? faults.rateLimitRate
                faults.dropAfterCommitRate = try rate(body, "dropAfterCommitRate") ?? faults.dropAfterCommitRate
                if let latency = body["latencyMs"] {
                    guard case .string(let text) = latency else {
                        throw APIError.validation("latencyMs", "must be a string \"A-B\"")
                    }
                    do { faults.latencyMilliseconds = try .parsingMilliseconds(text) } catch {
                        throw APIError.validation("latencyMs", "\(error)")
                    }
                }
                if let retryAfter = body["retryAfterSeconds"] {
                    guard case .integer(let seconds) = retryAfter, seconds >= 0 else {
                        throw APIError.validation("retryAfterSeconds", "must be an integer >= 0")
                    }
                    faults.retryAfterSeconds = Int(seconds)
                }
                if let seed = body["seed"] {
                    guard case .integer(let value) = seed, value >= 0 else {
                        throw APIError.validation("seed", "must be an integer >= 0")
                    }
                    faults.seed = UInt64(value)
                }
                state.faults.replace(faults)
                return DevServerState.jsonResponse(status: .ok, body: faultsJSON(faults))
            },
        ]
    }

    private static var referenceKinds: [(name: String, keyPath: WritableKeyPath<ReferenceIDs, IDSet>)] {
        [
            ("rifles", \.rifleSetups), ("locations", \.locations), ("ammunition", \.ammunition),
            ("ammoLots", \.ammoLots),
        ]
    }

    private static func changeReferences(_ request: Request, state: DevServerState, replacing: Bool) async throws
        -> Response
    {
        let body = try await adminBody(request)
        var changes: [(WritableKeyPath<ReferenceIDs, IDSet>, IDSet)] = []
        for kind in referenceKinds {
            guard let value = body[kind.name] else { continue }
            changes.append((kind.keyPath, try idSet(value, field: kind.name)))
        }
        let updated = state.references.withLock { references in
            for (keyPath, ids) in changes {
                if replacing { references[keyPath: keyPath] = ids } else { references[keyPath: keyPath].formUnion(ids) }
            }
            return references
        }
        return DevServerState.jsonResponse(status: .ok, body: referencesJSON(updated))
    }

    private static func idSet(_ value: JSONValue, field: String) throws(APIError) -> IDSet {
        func parse(_ text: String) throws(APIError) -> IDSet {
            do { return try IDSet(parsing: text) } catch { throw APIError.validation(field, "\(error)") }
        }
        switch value {
        case .string(let text):
            return try parse(text)
        case .array(let items):
            var set = IDSet(ranges: [])
            for item in items {
                switch item {
                case .integer(let id) where id >= 1: set.formUnion(IDSet(Int(id)...Int(id)))
                case .string(let text): set.formUnion(try parse(text))
                default: throw APIError.validation(field, "items must be ids >= 1 or \"A-B\" ranges")
                }
            }
            return set
        default:
            throw APIError.validation(field, "must be an array of ids and ranges, or a string like \"1-10,42\"")
        }
    }

    private static func referencesJSON(_ references: ReferenceIDs) -> String {
        var text = "{"
        for (index, kind) in referenceKinds.enumerated() {
            if index > 0 { text += "," }
            text.appendJSONString(kind.name)
            text += ":"
            text.appendJSONString(references[keyPath: kind.keyPath].description)
        }
        return text + "}"
    }

    private static func faultsJSON(_ faults: FaultConfiguration) -> String {
        let latency = faults.latencyMilliseconds
        return
            #"{"failRate":\#(faults.failRate),"rateLimitRate":\#(faults.rateLimitRate),"dropAfterCommitRate":\#(faults.dropAfterCommitRate),"latencyMs":"\#(latency.lowerBound)-\#(latency.upperBound)","retryAfterSeconds":\#(faults.retryAfterSeconds),"seed":\#(faults.seed)}"#
    }

    private static func rate(_ body: JSONValue, _ field: String) throws(APIError) -> Double? {
        guard let value = body[field] else { return nil }
        let rate: Double
        switch value {
        case .integer(let integer): rate = Double(integer)
        case .number(let number): rate = number
        default: throw APIError.validation(field, "must be a number between 0 and 1")
        }
        guard (0...1).contains(rate) else { throw APIError.validation(field, "must be between 0 and 1 (was \(rate))") }
        return rate
    }

    private static func adminBody(_ request: Request) async throws -> JSONValue {
        var noFingerprint: RequestFingerprint? = nil
        let buffer = try await BoundedBody.collect(request, limit: 1024 * 1024, fingerprint: &noFingerprint)
        let value: JSONValue
        do {
            value = try buffer.withUnsafeReadableBytes { try JSONValue.parse($0) }
        } catch let error as JSONParseError {
            throw APIError.validation("body", error.description)
        }
        guard case .object = value else { throw APIError.validation("body", "must be a JSON object") }
        return value
    }
}
