import Crypto
import Hummingbird

/// SHA-256 over the method, the path and the exact body bytes, as docs/api.yaml defines a request's
/// identity for idempotency. Fed while the body is read, so no second pass over an image.
struct RequestFingerprint {
    private var hasher = SHA256()

    init(method: String, path: String) {
        // NUL separators: no method/path pair can run into another.
        (Array(method.utf8) + [0] + Array(path.utf8) + [0]).withUnsafeBytes { hasher.update(bufferPointer: $0) }
    }

    mutating func update(_ buffer: ByteBuffer) {
        buffer.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
    }

    func finalize() -> String { hasher.finalize().hexString }
}

/// SHA-256 of `bytes` as lowercase hex.
func sha256Hex(_ bytes: [UInt8]) -> String {
    var hasher = SHA256()
    bytes.withUnsafeBytes { hasher.update(bufferPointer: $0) }
    return hasher.finalize().hexString
}

extension Sequence where Element == UInt8 {
    var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(64)
        for byte in self {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
