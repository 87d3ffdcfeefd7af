import Crypto

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The image types the API takes, recognised by their first bytes (never by a header or a name).
enum ImageType: String, Sendable {
    case jpeg = "image/jpeg"
    case png = "image/png"
    case heic = "image/heic"
    case webp = "image/webp"

    private static let heicBrands: Set<String> = ["heic", "heix", "hevc", "hevx", "mif1", "msf1", "heim", "heis"]

    /// JPEG `FF D8 FF`; PNG's 8-byte signature; HEIC: an ISO-BMFF `ftyp` box at offset 4 with a
    /// HEIF brand; WebP: `RIFF....WEBP`.
    init?(sniffing bytes: UnsafeRawBufferPointer) {
        func matches(_ offset: Int, _ expected: [UInt8]) -> Bool {
            guard bytes.count >= offset + expected.count else { return false }
            return expected.indices.allSatisfy { bytes[offset + $0] == expected[$0] }
        }
        if matches(0, [0xFF, 0xD8, 0xFF]) {
            self = .jpeg
        } else if matches(0, [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) {
            self = .png
        } else if matches(0, Array("RIFF".utf8)), matches(8, Array("WEBP".utf8)) {
            self = .webp
        } else if matches(4, Array("ftyp".utf8)), bytes.count >= 12,
            Self.heicBrands.contains(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[8..<12]), as: UTF8.self))
        {
            self = .heic
        } else {
            return nil
        }
    }
}

/// An image upload that passed every check, ready to store as metadata.
struct ValidatedImage: Sendable {
    let clientId: String
    let fileName: String
    let role: String
    let contentType: String
    let size: Int
    let sha256: String

    var fieldsJSON: String {
        var text = #"{"clientId":"\#(clientId)","fileName":"#
        text.appendJSONString(fileName)
        text += #","role":"\#(role)","contentType":"\#(contentType)","size":\#(size),"sha256":"\#(sha256)"}"#
        return text
    }
}

/// Reads a `multipart/form-data` body (already collected under the size limit) into a
/// ``ValidatedImage``: fields `clientId`, `role` (photo|original|annotated), `fileName`, `file`.
///
/// The body is collected whole (bounded by `--max-image-bytes` plus a small allowance for the
/// other parts) rather than streamed: simpler, and bounded all the same.
enum MultipartImageParser {
    static let roles: Set<String> = ["photo", "original", "annotated"]
    /// The largest text field (clientId, role, fileName) taken.
    static let maximumFieldBytes = 4096

    /// The boundary of a `multipart/form-data` Content-Type, or a 415/422 error.
    static func boundary(contentType: String?) throws(APIError) -> String {
        guard let contentType else {
            throw APIError.unsupportedMediaType(
                "the body must be multipart/form-data (no Content-Type)", field: "Content-Type")
        }
        let parameters = contentType.split(separator: ";").map { $0.trimmingSpaces }
        guard let mediaType = parameters.first, mediaType.lowercased() == "multipart/form-data" else {
            throw APIError.unsupportedMediaType(
                "the body must be multipart/form-data (was \(contentType))", field: "Content-Type")
        }
        for parameter in parameters.dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].trimmingSpaces.lowercased() == "boundary" else { continue }
            var value = pair[1].trimmingSpaces
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 { value = value.dropFirst().dropLast() }
            guard !value.isEmpty, value.utf8.count <= 70 else { break }
            return String(value)
        }
        throw APIError.validation("Content-Type", "multipart/form-data needs a boundary parameter")
    }

    static func parse(
        _ body: UnsafeRawBufferPointer, boundary: String, maxImageBytes: Int
    ) throws(APIError) -> ValidatedImage {
        let delimiter = Array("--\(boundary)".utf8)
        let partSeparator = Array("\r\n--\(boundary)".utf8)
        var fields: [String: String] = [:]
        var file: UnsafeRawBufferPointer? = nil

        // The first delimiter may be preceded by a preamble; it is then preceded by CRLF.
        guard var position = find(delimiter, in: body, from: 0) else {
            throw APIError.validation("body", "no multipart boundary found")
        }
        position += delimiter.count
        while true {
            // After a delimiter: "--" closes the body; otherwise optional spaces, then CRLF.
            if startsWith([0x2D, 0x2D], in: body, at: position) { break }
            while position < body.count, body[position] == 0x20 || body[position] == 0x09 { position += 1 }
            guard startsWith([0x0D, 0x0A], in: body, at: position) else {
                throw APIError.validation("body", "malformed multipart body (expected CRLF after a boundary)")
            }
            position += 2
            guard let headersEnd = find([0x0D, 0x0A, 0x0D, 0x0A], in: body, from: position) else {
                throw APIError.validation("body", "malformed multipart body (part headers do not end)")
            }
            let headers = String(decoding: UnsafeRawBufferPointer(rebasing: body[position..<headersEnd]), as: UTF8.self)
            let contentStart = headersEnd + 4
            guard let contentEnd = find(partSeparator, in: body, from: contentStart) else {
                throw APIError.validation("body", "malformed multipart body (a part does not end)")
            }
            let content = UnsafeRawBufferPointer(rebasing: body[contentStart..<contentEnd])
            if let name = partName(headers: headers) {
                if name == "file" {
                    guard file == nil else { throw APIError.validation("file", "must be sent once") }
                    file = content
                } else if ["clientId", "role", "fileName"].contains(name) {
                    guard fields[name] == nil else { throw APIError.validation(name, "must be sent once") }
                    guard content.count <= maximumFieldBytes else {
                        throw APIError.validation(name, "must be at most \(maximumFieldBytes) bytes")
                    }
                    guard let text = String(validating: content, as: UTF8.self) else {
                        throw APIError.validation(name, "must be UTF-8 text")
                    }
                    fields[name] = text
                }
            }
            position = contentEnd + partSeparator.count
        }

        guard let clientId = fields["clientId"] else { throw APIError.validation("clientId", "is required") }
        guard isUUID(clientId) else {
            throw APIError.validation("clientId", "must be a UUID (was \(clientId.debugDescription))")
        }
        guard let role = fields["role"] else { throw APIError.validation("role", "is required") }
        guard roles.contains(role) else {
            throw APIError.validation(
                "role", "must be one of photo, original, annotated (was \(role.debugDescription))")
        }
        guard let fileName = fields["fileName"] else { throw APIError.validation("fileName", "is required") }
        guard !fileName.isEmpty else { throw APIError.validation("fileName", "must not be empty") }
        guard let file else { throw APIError.validation("file", "is required") }
        guard file.count <= maxImageBytes else {
            throw APIError.payloadTooLarge(
                "file: the image is \(file.count) bytes, above the limit of \(maxImageBytes)")
        }
        guard let type = ImageType(sniffing: file) else {
            throw APIError.unsupportedMediaType(
                "file: not a JPEG, PNG, HEIC or WebP image (by its first bytes)", field: "file")
        }
        var hasher = SHA256()
        hasher.update(bufferPointer: file)
        return ValidatedImage(
            clientId: clientId, fileName: fileName, role: role, contentType: type.rawValue, size: file.count,
            sha256: hasher.finalize().hexString)
    }

    /// The `name` parameter of a part's `Content-Disposition: form-data` header.
    static func partName(headers: String) -> String? {
        for line in headers.split(separator: "\r\n") {
            let header = line.split(separator: ":", maxSplits: 1)
            guard header.count == 2, header[0].trimmingSpaces.lowercased() == "content-disposition" else { continue }
            for parameter in header[1].split(separator: ";").dropFirst() {
                let pair = parameter.split(separator: "=", maxSplits: 1)
                guard pair.count == 2, pair[0].trimmingSpaces.lowercased() == "name" else { continue }
                var value = pair[1].trimmingSpaces
                if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 {
                    value = value.dropFirst().dropLast()
                }
                return String(value)
            }
        }
        return nil
    }

    private static func startsWith(_ prefix: [UInt8], in body: UnsafeRawBufferPointer, at offset: Int) -> Bool {
        guard offset + prefix.count <= body.count else { return false }
        return prefix.indices.allSatisfy { body[offset + $0] == prefix[$0] }
    }

    /// The offset of `needle` in `body` at or after `start`: memchr for the first byte, then
    /// memcmp (fast on megabytes; glibc's memmem needs _GNU_SOURCE).
    private static func find(_ needle: [UInt8], in body: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard let first = needle.first, let base = body.baseAddress else { return nil }
        return needle.withUnsafeBytes { needleBytes -> Int? in
            var position = start
            while position + needle.count <= body.count {
                guard let found = memchr(base + position, Int32(first), body.count - position) else { return nil }
                let offset = base.distance(to: UnsafeRawPointer(found))
                guard offset + needle.count <= body.count else { return nil }
                if memcmp(found, needleBytes.baseAddress!, needle.count) == 0 { return offset }
                position = offset + 1
            }
            return nil
        }
    }
}
