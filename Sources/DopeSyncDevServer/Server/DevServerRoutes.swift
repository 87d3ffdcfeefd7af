import HTTPTypes
import Hummingbird

/// The routes of docs/api.yaml and the admin routes, on one router.
enum DevServerRoutes {
    static func router(state: DevServerState) -> Router<DevServerRequestContext> {
        var routes = apiRoutes(state: state) + AdminRoutes.routes(state: state)
        if state.configuration.referenceLists { routes += ReferenceListRoutes.routes(state: state) }
        var table = RouteTable(routes.map { ($0.method, $0.path) })
        if !state.configuration.lookups {
            // A backend without the lookups: the table (hence `Allow`) lacks them, and they answer
            // the configured status instead of Hummingbird's 404 or the middleware's 405.
            routes.removeAll { $0.method == .get && lookupPaths.contains($0.path) }
            let served = RouteTable(routes.map { ($0.method, $0.path) })
            let status = state.configuration.lookupsStatus
            for path in lookupPaths {
                routes.append(
                    Route(.get, path) { request, _ in
                        throw missingLookup(request, status: status, table: served)
                    })
            }
            table = served
        }
        let router = Router(context: DevServerRequestContext.self)
        // First, so it wraps every route and the not-found answer; it sees the whole table.
        router.add(middleware: DevServerMiddleware(state: state, routes: table))
        for route in routes {
            router.on(RouterPath(route.path), method: route.method, use: route.handler)
        }
        return router
    }

    /// Every path and method of docs/api.yaml.
    static func apiRoutes(state: DevServerState) -> [Route] {
        var routes = [
            Route(.get, "/api/health") { _, _ in
                DevServerState.jsonResponse(status: .ok, body: #"{"status":"ok"}"#)
            },
            Route(.post, "/api/sessions") { request, context in
                try await state.create(request, context: context, kind: .session, parent: .none)
            },
            Route(.get, "/api/sessions") { request, _ in try await sessions(request, state: state) },
            Route(.get, "/api/sessions/:sessionId") { _, context in try await sessionTree(context, state: state) },
        ]
        // The records hung directly under a session.
        for (segment, kind) in [("dope", RecordKind.dope), ("chrono", .chrono), ("groups", .group)] {
            routes.append(
                Route(.post, "/api/sessions/:sessionId/\(segment)") { request, context in
                    let session = try pathID(context, "sessionId", name: "session")
                    return try await state.create(request, context: context, kind: kind, parent: .session(session))
                })
        }
        routes += [
            Route(.post, "/api/sessions/:sessionId/chrono/:chronoId/readings") { request, context in
                let session = try pathID(context, "sessionId", name: "session")
                let chrono = try pathID(context, "chronoId", name: "chrono session")
                return try await state.create(
                    request, context: context, kind: .reading, parent: .chrono(session: session, chrono: chrono))
            },
            Route(.post, "/api/groups/:groupId/measurement") { request, context in
                let group = try pathID(context, "groupId", name: "group")
                return try await state.create(request, context: context, kind: .measurement, parent: .group(group))
            },
            Route(.post, "/api/groups/:groupId/images") { request, context in
                let group = try pathID(context, "groupId", name: "group")
                return try await state.create(request, context: context, kind: .image, parent: .group(group))
            },
        ]
        return routes
    }

    /// The paths of the two lookups, both `GET`.
    static let lookupPaths = ["/api/sessions", "/api/sessions/:sessionId"]

    /// What a lookup answers on a server without lookups (`--no-lookups`).
    static func missingLookup(_ request: Request, status: MissingLookupsStatus, table: RouteTable) -> APIError {
        let path = request.uri.path
        switch status {
        case .notFound:
            return APIError.notFound("GET \(path) is not served: this server has no lookups (--no-lookups)")
        case .methodNotAllowed:
            return APIError.methodNotAllowed(.get, path: path, allowed: table.methods(forPath: path) ?? [])
        }
    }

    /// `GET /api/sessions?clientId=`: `{"items": [Created]}`, zero or one.
    static func sessions(_ request: Request, state: DevServerState) async throws -> Response {
        guard let clientId = request.uri.queryParameters.get("clientId") else {
            throw APIError.validation("clientId", "is required")
        }
        guard isUUID(clientId) else { throw APIError.validation("clientId", "must be a UUID") }
        let items = try await state.store.sessions(clientId: clientId)
            .map { DevServerStore.createdBody(id: $0.id, clientId: $0.clientId) }
        return DevServerState.jsonResponse(status: .ok, body: #"{"items":[\#(items.joined(separator: ","))]}"#)
    }

    /// `GET /api/sessions/{sessionId}`: the session tree, or 404.
    static func sessionTree(_ context: DevServerRequestContext, state: DevServerState) async throws -> Response {
        let sessionId = try pathID(context, "sessionId", name: "session")
        guard let records = try await state.store.sessionRecords(id: sessionId) else {
            throw APIError.notFound("session \(sessionId) does not exist")
        }
        return DevServerState.jsonResponse(status: .ok, body: SessionTree.json(records))
    }

    /// A path id: an integer >= 1, or 404 (no record can have that id).
    static func pathID(_ context: DevServerRequestContext, _ parameter: String, name: String) throws(APIError) -> Int64
    {
        let text = context.parameters.get(parameter) ?? ""
        guard let id = Int64(text), id >= 1 else {
            throw APIError.notFound("\(name) \(text.debugDescription) does not exist")
        }
        return id
    }
}

/// Builds docs/api.yaml's SessionTree from a session's rows, every record in creation order.
///
/// Each record is `{"id": …, <every stored field>}`; a chrono session adds `readings`, a group
/// adds `measurement` (the first one created, absent if none), `measurements` (all of them,
/// so a duplicate shows) and `images` (fileName, role, contentType, size, sha256).
enum SessionTree {
    static func json(_ records: [DevServerStore.StoredRecord]) -> String {
        var readings: [Int64: [String]] = [:]
        var measurements: [Int64: [String]] = [:]
        var images: [Int64: [String]] = [:]
        for record in records {
            guard let parent = record.parentId else { continue }
            switch record.kind {
            case .reading: readings[parent, default: []].append(object(record))
            case .measurement: measurements[parent, default: []].append(object(record))
            case .image: images[parent, default: []].append(object(record))
            default: break
            }
        }
        var dope: [String] = []
        var chrono: [String] = []
        var groups: [String] = []
        for record in records {
            switch record.kind {
            case .dope: dope.append(object(record))
            case .chrono:
                chrono.append(
                    object(record, extra: #""readings":[\#(readings[record.id, default: []].joined(separator: ","))]"#))
            case .group:
                let groupMeasurements = measurements[record.id, default: []]
                var extra = ""
                if let first = groupMeasurements.first { extra += #""measurement":\#(first),"# }
                extra += #""measurements":[\#(groupMeasurements.joined(separator: ","))],"#
                extra += #""images":[\#(images[record.id, default: []].joined(separator: ","))]"#
                groups.append(object(record, extra: extra))
            default: break
            }
        }
        guard let session = records.first else { return "{}" }
        let children =
            #""dope":[\#(dope.joined(separator: ","))],"chrono":[\#(chrono.joined(separator: ","))],"groups":[\#(groups.joined(separator: ","))]"#
        return object(session, extra: children)
    }

    /// `{"id":N,<stored fields>,<extra>}`; stored fields are a JSON object that starts with clientId.
    private static func object(_ record: DevServerStore.StoredRecord, extra: String = "") -> String {
        var inner = Substring(record.fieldsJSON)
        if inner.first == "{" { inner = inner.dropFirst() }
        if inner.last == "}" { inner = inner.dropLast() }
        var text = #"{"id":\#(record.id)"#
        if !inner.isEmpty { text += "," + inner }
        if !extra.isEmpty { text += "," + extra }
        return text + "}"
    }
}
