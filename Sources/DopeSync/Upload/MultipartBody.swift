import Crypto
import Foundation
import NIOCore
import Synchronization

/// The multipart/form-data framing of an image upload. Deterministic, so a step sent again is
/// byte-for-byte the same request, and a boundary that provably occurs in no part:
/// - the text parts are a UUID, a role and a file name without control characters (validation),
///   and a delimiter starts with CR LF;
/// - the image: its boundary is `dopesync-` and 32 hex digits of its key's hash, unless
///   validation saw ``boundaryMarker`` (`--dopesync-`) anywhere in its bytes; then the boundary
///   also hashes the image's SHA-256, which no file can contain without knowing its own hash.
///   What a producer computes from a bundle's ids is thus either absent or not the boundary;
/// - bytes rewritten after validation are searched while they stream (``MultipartBody``).
struct MultipartFraming: Sendable {
    /// Whatever begins a delimiter of a boundary made from a key alone.
    static let boundaryMarker = multipartBoundaryMarker

    let boundary: String
    let head: [UInt8]
    let tail: [UInt8]

    init(idempotencyKey: String, groupID: String, role: String, image: BundleImage) {
        let seed = image.holdsBoundaryMarker ? "\(idempotencyKey)\n\(image.sha256)" : idempotencyKey
        let boundary = "dopesync-" + String(SHA256.hash(data: Array(seed.utf8)).hexString.prefix(32))
        self.boundary = boundary
        func field(_ name: String, _ value: String) -> String {
            "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"\r\n\r\n\(value)\r\n"
        }
        // RFC 7578 4.2 (as browsers do): a quote in a quoted file name is written %22.
        let quotedName = image.fileName.replacingOccurrences(of: "\"", with: "%22")
        let text =
            field("clientId", groupID) + field("role", role) + field("fileName", image.fileName)
            + "--\(boundary)\r\nContent-Disposition: form-data; name=\"file\"; filename=\"\(quotedName)\"\r\n"
            + "Content-Type: \(image.type.contentType)\r\n\r\n"
        head = Array(text.utf8)
        tail = Array("\r\n--\(boundary)--\r\n".utf8)
    }

    var contentType: String { "multipart/form-data; boundary=\(boundary)" }

    /// What must never occur in the image's bytes as sent: its delimiter, less the CR LF.
    var delimiter: String { "--" + boundary }

    func contentLength(imageSize: Int64) -> Int64 { Int64(head.count) + imageSize + Int64(tail.count) }
}

/// The multipart body of an image step: the framing's head, the image streamed chunk by chunk
/// from the archive (``ArchiveImages``, which reads each chunk off the event loops), the tail.
/// Memory holds one chunk, never the image.
///
/// One use only: its chunks come from an archive reader positioned at the image, which a second
/// pass could not rewind, and whose bytes would then fail the SHA-256 check and be blamed on the
/// bundle. So the first ``makeAsyncIterator()`` gets the image, and any later one (a copy's
/// included) an iterator that throws ``UsedTwice``: a transport failure, after which the step is
/// tried again with the image opened anew (``APIClient``'s `send`).
struct MultipartBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let framing: MultipartFraming
    let image: BundleImage
    /// Positioned at `image` by ``ArchiveImages/open(_:)``, which returned `reading`.
    let images: ArchiveImages
    let reading: Int
    /// Shared by copies of the body: one iterator for all of them.
    private let iterated = OnceFlag()

    init(framing: MultipartFraming, image: BundleImage, images: ArchiveImages, reading: Int) {
        self.framing = framing
        self.image = image
        self.images = images
        self.reading = reading
    }

    /// A second pass over one body: the request fails as the transport would, not as the bundle.
    struct UsedTwice: Error, CustomStringConvertible {
        var description: String { "an image's request body was asked for twice; the step is tried again" }
    }

    /// Each chunk is searched for the boundary before it goes out, and the image's size and
    /// SHA-256 are checked before the closing delimiter does: bytes rewritten since validation
    /// end the request short of its length, so no server can take it for a whole one.
    struct AsyncIterator: AsyncIteratorProtocol {
        enum Part { case head, image, end, usedTwice }
        var part = Part.head
        let body: MultipartBody
        var search: StreamingSearch

        mutating func next() async throws -> ByteBuffer? {
            switch part {
            case .head:
                part = .image
                return ByteBuffer(bytes: body.framing.head)
            case .image:
                if let chunk = try await body.images.nextChunk(of: body.reading) {
                    search.update(chunk)
                    if search.found {
                        throw BundleError(
                            .changedAfterValidation, culprit: body.image.entryPath,
                            message: MultipartBody.holdsBoundary(body.image))
                    }
                    return ByteBuffer(bytes: chunk)
                }
                part = .end
                return ByteBuffer(bytes: body.framing.tail)
            case .end:
                return nil
            case .usedTwice:
                throw UsedTwice()
            }
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(
            part: iterated.take() ? .head : .usedTwice, body: self, search: StreamingSearch(framing.delimiter))
    }

    static func holdsBoundary(_ image: BundleImage) -> String {
        "\(image.entryPath) now holds its request's multipart boundary, which validation did not see: "
            + "the bundle was written to after it was validated; nothing of this image was sent whole"
    }
}

/// True for the first ``take()`` only, from any thread.
final class OnceFlag: Sendable {
    private let taken = Atomic(false)
    func take() -> Bool { taken.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged }
}
