extension Sequence where Element == UInt8 {
    /// Lowercase hexadecimal, two digits a byte: the worker's one hex encoder (digests, sniffed
    /// bytes in messages, `\xNN` escapes).
    package var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var bytes: [UInt8] = []
        for byte in self {
            bytes.append(digits[Int(byte >> 4)])
            bytes.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
