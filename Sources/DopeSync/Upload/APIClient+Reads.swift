import AsyncHTTPClient
import NIOCore
import NIOHTTP1

/// The reads of the API: the lookups before a step is sent again, and the reference lists.
extension APIClient {
    /// How the API answered a lookup (`GET`).
    enum LookupAnswer: Sendable, Equatable {
        /// 200 and the body.
        case found([UInt8])
        /// 404 or 405 (501): no such thing here, or no such endpoint; the caller tells which.
        case notFound(status: Int)
        /// Anything else, classified as a step's answer would be (retryable, unauthorized, …).
        case failed(StepResponse)
    }

    /// `GET path`, for looking records up before a step is sent again. Bodies up to 16 MiB
    /// (a session tree of thousands of records).
    func get(_ path: String) async -> LookupAnswer {
        switch await exchange(path, ifNoneMatch: nil) {
        case .failed(let failed): return .failed(failed)
        case .answered(let status, let headers, let body):
            if status == 200 { return .found(Array(body.readableBytesView)) }
            return Self.unsuccessfulGet(status: status, headers: headers, body: body)
        }
    }

    /// How the API answered the read of a reference list.
    enum ListAnswer: Sendable, Equatable {
        /// 200: the list, and its `ETag` if it sent one.
        case list([UInt8], etag: String?)
        /// 304: the list kept under the ETag sent is still the server's.
        case notModified
        /// 404 or 405 (501): an API without the lists.
        case notFound(status: Int)
        /// Anything else, classified as a step's answer would be.
        case failed(StepResponse)
    }

    /// `GET` a reference list, conditional on the ETag of the copy kept.
    func getList(_ path: String, ifNoneMatch etag: String?) async -> ListAnswer {
        switch await exchange(path, ifNoneMatch: etag) {
        case .failed(let failed): return .failed(failed)
        case .answered(let status, let headers, let body):
            switch status {
            case 200: return .list(Array(body.readableBytesView), etag: headers.first(name: "ETag"))
            case 304 where etag != nil: return .notModified
            default:
                switch Self.unsuccessfulGet(status: status, headers: headers, body: body) {
                case .notFound(let status): return .notFound(status: status)
                case .failed(let response): return .failed(response)
                case .found: preconditionFailure("only a 200 is found")
                }
            }
        }
    }

    private enum Exchange {
        case answered(status: Int, headers: HTTPHeaders, body: ByteBuffer)
        case failed(StepResponse)
    }

    /// A `GET` sent and its answer read; a failure when there was no answer, or an answer that
    /// cannot be the API's (``misdirection(_:url:)``; a 304 to a conditional GET is no redirect).
    private func exchange(_ path: String, ifNoneMatch etag: String?) async -> Exchange {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = .GET
        request.headers.add(name: "Authorization", value: "Bearer \(credential.current)")
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: "User-Agent", value: "dopesync/\(DopeSyncInfo.version)")
        if let etag { request.headers.add(name: "If-None-Match", value: etag) }
        do {
            let response = try await http.execute(request, timeout: .init(timeouts.request))
            let body = try await response.body.collect(upTo: 16 << 20)
            let status = Int(response.status.code)
            if !(status == 304 && etag != nil), let misdirected = Self.misdirection(response, url: request.url) {
                return .failed(.misdirected(message: misdirected))
            }
            return .answered(status: status, headers: response.headers, body: body)
        } catch {
            return .failed(classify(error))
        }
    }

    /// A `GET`'s answer other than 200, classified.
    private static func unsuccessfulGet(status: Int, headers: HTTPHeaders, body: ByteBuffer) -> LookupAnswer {
        let answer = decodeAnswer(body)
        let message = answer.message ?? "HTTP \(status)"
        switch status {
        case 404, 405, 501: return .notFound(status: status)
        case 401, 403: return .failed(.unauthorized(status: status, message: message))
        case 408, 409, 425, 429, 500...599:
            let retryAfter = headers.first(name: "Retry-After").flatMap(parseRetryAfter)
            return .failed(.retryable(status: status, retryAfter: retryAfter, message: message))
        default: return .failed(.rejected(status: status, code: answer.code, message: message, field: answer.field))
        }
    }
}
