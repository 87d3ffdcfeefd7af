import AsyncHTTPClient
import Foundation
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
    /// What the API says of the current token alone (docs/troubleshooting.md, "Exit 77: credentials refused").
    enum TokenCheck: Equatable {
        /// A request that needs nothing else was answered: the token is taken.
        case accepted
        /// Refused there too (401, 403): the token is wrong.
        case refused
        /// No answer that says either way (a timeout, a 5xx, a 429): the API cannot say now.
        case unanswered(String)
        /// The API has neither session lookups nor reference lists: nothing to ask.
        case nothingToAsk
    }

    /// Asks the API whether it takes the current token for a request that needs nothing else: a
    /// lookup of a client id no record has, or, where there are no lookups, the rifles list.
    func checkToken(counting counters: RunCounters) async -> TokenCheck {
        for path in [Self.lookupOfNoRecord, ReferenceList.rifles.path] {
            counters.request(bytes: 0)
            switch await get(path) {
            case .found: return .accepted
            case .notFound: continue
            case .failed(.unauthorized): return .refused
            case .failed(let response): return .unanswered(CheckCommand.describe(response))
            }
        }
        return .nothingToAsk
    }

    /// Whose a refusal of a bundle's request that stood is (docs/troubleshooting.md, "Exit 77: credentials refused").
    enum TokenVerdict: Equatable {
        /// The bundle's: deferred, counted, and the other bundles go on.
        case bundles
        /// The token's: the run stops, every bundle back uncounted, exit 77.
        case token
        /// Nobody's yet: the API could not say now. The bundle goes back uncounted and the run
        /// goes on; neither is blamed on an answer that was not given.
        case undecided(String)
    }

    /// Whose a refusal is, given the token's own check and whether a create sent with this token
    /// went through in this run: an API with nothing to ask is judged by the run's own creates.
    static func verdict(_ check: TokenCheck, tokenCreatedThisRun: Bool) -> TokenVerdict {
        switch check {
        case .accepted: .bundles
        case .refused: .token
        case .unanswered(let why): .undecided(why)
        case .nothingToAsk: tokenCreatedThisRun ? .bundles : .token
        }
    }

    /// A session lookup by a fresh client id, which no record has: it creates nothing, needs the
    /// token, and its 200 (lookups there), 404 or 405 (none) says whether the API can look
    /// records up (`check`, the run's API binding, the token's check).
    static var lookupOfNoRecord: String { "/api/sessions?clientId=\(UUID().uuidString.lowercased())" }

    func get(_ path: String) async -> LookupAnswer {
        switch await exchange(path, ifNoneMatch: nil) {
        case .failed(let failed): return .failed(failed)
        case .answered(let status, let headers, let body):
            switch status {
            case 200: return .found(Array(body.readableBytesView))
            // No such thing here, or no such endpoint (the caller tells which).
            case 404, 405, 501: return .notFound(status: status)
            default: return .failed(Self.refusal(status: status, headers: headers, answer: Self.decodeAnswer(body)))
            }
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
        // A list may be megabytes: its whole answer gets the time of its largest at the slowest
        // rate, as a step's body does.
        switch await exchange(path, ifNoneMatch: etag, within: deadline(forBodyOf: Int64(Self.largestAnswer))) {
        case .failed(let failed): return .failed(failed)
        case .answered(let status, let headers, let body):
            switch status {
            case 200: return .list(Array(body.readableBytesView), etag: headers.first(name: "ETag"))
            case 304 where etag != nil: return .notModified
            case 404, 405, 501: return .notFound(status: status)
            default: return .failed(Self.refusal(status: status, headers: headers, answer: Self.decodeAnswer(body)))
            }
        }
    }

    private enum Exchange {
        case answered(status: Int, headers: HTTPHeaders, body: ByteBuffer)
        case failed(StepResponse)
    }

    /// A `GET` sent and its answer read; a failure when there was no answer, or an answer that
    /// cannot be the API's (``misdirection(_:url:)``; a 304 to a conditional GET is no redirect).
    /// The largest answer a `GET` may bring.
    static let largestAnswer = 16 << 20

    private func exchange(_ path: String, ifNoneMatch etag: String?, within limit: Duration? = nil) async -> Exchange {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = .GET
        request.headers.add(name: "Authorization", value: "Bearer \(credential.current)")
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: "User-Agent", value: "dopesync/\(DopeSyncInfo.version)")
        if let etag { request.headers.add(name: "If-None-Match", value: etag) }
        do {
            let (response, body) = try await exchange(
                request, within: limit ?? timeouts.request, upTo: Self.largestAnswer)
            let status = Int(response.status.code)
            if !(status == 304 && etag != nil), let misdirected = Self.misdirection(response, url: request.url) {
                return .failed(.misdirected(message: misdirected))
            }
            return .answered(status: status, headers: response.headers, body: body)
        } catch {
            return .failed(await classify(error))
        }
    }

}
