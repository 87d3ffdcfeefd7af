import HTTPTypes
import Hummingbird

/// Reads request bodies under a hard limit, never more: a larger body is refused with 413 as
/// soon as it is known to be larger (from `Content-Length`, or while reading).
enum BoundedBody {
    static func collect(
        _ request: Request, limit: Int, fingerprint: inout RequestFingerprint?
    ) async throws -> ByteBuffer {
        if let declared = request.headers[.contentLength].flatMap(Int.init), declared > limit {
            throw APIError.payloadTooLarge("the body is \(declared) bytes, above the limit of \(limit)")
        }
        var collected = ByteBuffer()
        for try await chunk in request.body {
            guard collected.readableBytes + chunk.readableBytes <= limit else {
                throw APIError.payloadTooLarge("the body is larger than the limit of \(limit) bytes")
            }
            fingerprint?.update(chunk)
            var chunk = chunk
            collected.writeBuffer(&chunk)
        }
        return collected
    }
}
