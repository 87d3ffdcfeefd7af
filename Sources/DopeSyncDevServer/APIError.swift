import HTTPTypes
import Hummingbird

/// An error answer of the API: an HTTP status, a stable code, a message, and the culprit field.
///
/// Its body is the spec's `{"error": {"code": ..., "message": ..., "field": ...}}`.
struct APIError: Error, Sendable {
    /// The stable codes of docs/api.yaml (`Error.error.code`).
    struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String {
            case validationFailed = "validation_failed"
            case unknownReference = "unknown_reference"
            case notFound = "not_found"
            case unauthorized
            case forbidden
            case payloadTooLarge = "payload_too_large"
            case unsupportedMediaType = "unsupported_media_type"
            case idempotencyKeyInUse = "idempotency_key_in_use"
            case idempotencyKeyReused = "idempotency_key_reused"
            case rateLimited = "rate_limited"
            case methodNotAllowed = "method_not_allowed"
            case `internal`
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        static let validationFailed = Code(.validationFailed)
        static let unknownReference = Code(.unknownReference)
        static let notFound = Code(.notFound)
        static let unauthorized = Code(.unauthorized)
        static let forbidden = Code(.forbidden)
        static let payloadTooLarge = Code(.payloadTooLarge)
        static let unsupportedMediaType = Code(.unsupportedMediaType)
        static let idempotencyKeyInUse = Code(.idempotencyKeyInUse)
        static let idempotencyKeyReused = Code(.idempotencyKeyReused)
        static let rateLimited = Code(.rateLimited)
        /// Not in docs/api.yaml's list (which names no 405): the path exists, the method is not one it takes.
        static let methodNotAllowed = Code(.methodNotAllowed)
        static let `internal` = Code(.internal)

        var description: String { base.rawValue }
    }

    let status: HTTPResponse.Status
    let code: Code
    let message: String
    let field: String?
    /// Seconds for a `Retry-After` header (429, 503).
    var retryAfterSeconds: Int? = nil
    /// The methods for an `Allow` header (405).
    var allowedMethods: [HTTPRequest.Method]? = nil

    static func validation(_ field: String, _ message: String) -> APIError {
        APIError(status: .unprocessableContent, code: .validationFailed, message: "\(field): \(message)", field: field)
    }

    static func unknownReference(_ field: String, _ id: Int) -> APIError {
        APIError(
            status: .unprocessableContent, code: .unknownReference, message: "\(field): no such record (\(id))",
            field: field)
    }

    static func notFound(_ message: String) -> APIError {
        APIError(status: .notFound, code: .notFound, message: message, field: nil)
    }

    /// 405 with `Allow`: `path` exists, and takes `allowed`, not `method`.
    static func methodNotAllowed(_ method: HTTPRequest.Method, path: String, allowed: [HTTPRequest.Method]) -> APIError
    {
        let names = allowed.map(\.rawValue).joined(separator: ", ")
        var error = APIError(
            status: .methodNotAllowed, code: .methodNotAllowed,
            message: "\(path) does not take \(method.rawValue)" + (names.isEmpty ? "" : " (it takes \(names))"),
            field: nil)
        error.allowedMethods = allowed
        return error
    }

    static func payloadTooLarge(_ message: String) -> APIError {
        APIError(status: .contentTooLarge, code: .payloadTooLarge, message: message, field: nil)
    }

    static func unsupportedMediaType(_ message: String, field: String? = nil) -> APIError {
        APIError(status: .unsupportedMediaType, code: .unsupportedMediaType, message: message, field: field)
    }

    var response: Response {
        var json = #"{"error":{"code":"\#(code)","message":"#
        json.appendJSONString(message)
        if let field {
            json += #","field":"#
            json.appendJSONString(field)
        }
        json += "}}"
        var headers: HTTPFields = [.contentType: "application/json"]
        if let retryAfterSeconds { headers[.retryAfter] = String(retryAfterSeconds) }
        if let allowedMethods { headers[.allow] = allowedMethods.map(\.rawValue).joined(separator: ", ") }
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: json)))
    }
}

extension String {
    /// Appends `text` as a JSON string literal, quotes included.
    mutating func appendJSONString(_ text: String) {
        append("\"")
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": append("\\\"")
            case "\\": append("\\\\")
            case "\n": append("\\n")
            case "\r": append("\\r")
            case "\t": append("\\t")
            case let control where control.value < 0x20:
                let hex = String(control.value, radix: 16)
                append("\\u" + String(repeating: "0", count: 4 - hex.count) + hex)
            default: unicodeScalars.append(scalar)
            }
        }
        append("\"")
    }
}
