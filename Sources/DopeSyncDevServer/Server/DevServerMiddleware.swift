import HTTPTypes
import Hummingbird
import Logging

extension HTTPField.Name {
    /// Marks a replayed response (docs/api.yaml's `Replayed` header).
    static let idempotentReplayed = HTTPField.Name("Idempotent-Replayed")!
    static let idempotencyKey = HTTPField.Name("Idempotency-Key")!
}

/// `--redirect`: the answer to an `/api` POST.
private struct RedirectAnswer: Error {
    let status: Int
    let location: String
}

/// Outermost middleware: faults for `/api` POSTs, bearer auth, the spec's error bodies (405 with
/// `Allow` for a method that a known path does not take), one log line and one request-log
/// entry per request.
struct DevServerMiddleware: RouterMiddleware {
    typealias Context = DevServerRequestContext

    let state: DevServerState
    /// Every route the router has, to tell a method a path does not take from an unknown path.
    let routes: RouteTable

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let started = ContinuousClock.now
        let path = request.uri.path
        state.configuration.onRequest?(request.method.rawValue, path)
        var context = context
        var fault: String? = nil
        var response: Response
        do {
            if path.hasPrefix(DevServerConfiguration.redirectTargetPath) {
                // What a redirect leads to: a page that answers anything with a plausible "create".
                response = DevServerState.jsonResponse(status: .ok, body: #"{"id":424242}"#)
                record(
                    request, path: path, status: 200, replayed: false, fault: "redirected", since: started,
                    context: context)
                return response
            }
            if request.method == .post, path.hasPrefix("/api/"), let status = state.configuration.redirectStatus {
                fault = "redirect"
                throw RedirectAnswer(status: status, location: DevServerConfiguration.redirectTargetPath + path)
            }
            if request.method == .post, path.hasPrefix("/api/") {
                context.faults = state.faults.decide()
                switch context.faults.early {
                case .serverError(let status)?:
                    fault = "server_error"
                    throw APIError(
                        status: HTTPResponse.Status(code: status), code: .internal,
                        message: "injected fault (--fail-rate)", field: nil,
                        retryAfterSeconds: status == 503 ? state.faults.configuration.retryAfterSeconds : nil)
                case .rateLimited?:
                    fault = "rate_limited"
                    throw APIError(
                        status: .tooManyRequests, code: .rateLimited, message: "injected fault (--rate-limit-rate)",
                        field: nil, retryAfterSeconds: state.faults.configuration.retryAfterSeconds)
                case nil:
                    break
                }
            }
            var request = request
            if request.method == .post, path.hasPrefix("/api/"), let pattern = state.configuration.forbiddenBodyPattern
            {
                // The firewall reads the whole body before the API sees it (and hands it on).
                let body = try await request.collectBody(upTo: state.configuration.maxImageBytes + (1 << 20))
                if body.readableBytesView.firstRange(of: Array(pattern.utf8)) != nil {
                    fault = "forbidden_body"
                    record(
                        request, path: path, status: 403, replayed: false, fault: fault, since: started,
                        context: context)
                    return Response(
                        status: .forbidden, headers: [.contentType: "text/html"],
                        body: ResponseBody(
                            byteBuffer: ByteBuffer(
                                string: "<html><body><h1>403 Forbidden</h1><p>Request blocked.</p></body></html>\n")))
                }
            }
            if path != "/api/health" { try state.authorize(request) }
            response = try await next(request, context)
        } catch let error as APIError {
            response = error.response
        } catch let redirect as RedirectAnswer {
            response = Response(
                status: HTTPResponse.Status(code: redirect.status),
                headers: [.location: redirect.location, .contentType: "text/plain"],
                body: ResponseBody(byteBuffer: ByteBuffer(string: "moved to \(redirect.location)\n")))
        } catch is ConnectionDroppedAfterCommit {
            record(
                request, path: path, status: 201, replayed: false, fault: Observatory.droppedFault, since: started,
                context: context)
            throw ConnectionDroppedAfterCommit()
        } catch let error as any HTTPResponseError {
            // Hummingbird's own errors (no such route, a bad parameter): the spec's body all the same.
            // Its 404 means no route takes this method on this path: 405 if the path has others.
            if error.status == .notFound, let allowed = routes.methods(forPath: path), !allowed.contains(request.method)
            {
                response = APIError.methodNotAllowed(request.method, path: path, allowed: allowed).response
            } else {
                let code: APIError.Code =
                    error.status == .notFound ? .notFound : error.status.code >= 500 ? .internal : .validationFailed
                response =
                    APIError(status: error.status, code: code, message: "\(error.status.reasonPhrase)", field: nil)
                    .response
            }
        } catch {
            context.logger.error("request failed", metadata: ["error": "\(error)"])
            response =
                APIError(status: .internalServerError, code: .internal, message: "internal error", field: nil).response
        }
        let replayed = response.headers[.idempotentReplayed] == "true"
        record(
            request, path: path, status: response.status.code, replayed: replayed, fault: fault, since: started,
            context: context)
        // No route takes HEAD (docs/api.yaml has none): its 405 or 404 goes out with headers only.
        if request.method == .head { return response.createHeadResponse() }
        if let slow = state.configuration.slowBody, slow.applies(method: request.method.rawValue, path: path) {
            let body = response.body
            response.body = ResponseBody(contentLength: body.contentLength) { writer in
                try await body.write(SlowBodyWriter(parent: writer, byteInterval: slow.byteInterval))
            }
        }
        return response
    }

    private func record(
        _ request: Request, path: String, status: Int, replayed: Bool, fault: String?,
        since started: ContinuousClock.Instant,
        context: Context
    ) {
        let key = request.headers[.idempotencyKey]
        let entry = state.observatory.record(
            method: request.method.rawValue, path: path, idempotencyKey: key, status: status, replayed: replayed,
            fault: fault, received: started, answered: .now)
        if context.logger.logLevel <= .info {
            var metadata: Logger.Metadata = [
                "http.method": "\(request.method.rawValue)",
                "http.path": "\(path)",
                "http.status": "\(status)",
                "duration_ms": "\(entry.durationMilliseconds)",
                "replayed": "\(replayed)",
            ]
            if let fault { metadata["fault"] = "\(fault)" }
            context.logger.info("request", metadata: metadata)
        }
    }
}

/// `--slow-body`: hands on each buffer one byte at a time, `byteInterval` apart. The head, with
/// its full `Content-Length`, has already gone, so the client waits for every byte.
private struct SlowBodyWriter: ResponseBodyWriter {
    var parent: any ResponseBodyWriter
    let byteInterval: Duration

    mutating func write(_ buffer: ByteBuffer) async throws {
        for byte in buffer.readableBytesView {
            try await parent.write(ByteBuffer(bytes: [byte]))
            try await Task.sleep(for: byteInterval)
        }
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        try await parent.finish(trailingHeaders)
    }
}
