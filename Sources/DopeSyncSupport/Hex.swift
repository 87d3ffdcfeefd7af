import Foundation

extension Sequence where Element == UInt8 {
    /// Lowercase hexadecimal, two digits a byte: the worker's one hex encoder (digests, sniffed
    /// bytes in messages, `\xNN` escapes).
    package var hexString: String {
        if let text = withContiguousStorageIfAvailable({ hexEncoded(UnsafeRawBufferPointer($0)) }) { return text }
        return Array(self).withUnsafeBytes(hexEncoded)
    }
}

extension ContiguousBytes where Self: Sequence, Self.Element == UInt8 {
    /// ``Swift/Sequence/hexString`` read in place. A digest (swift-crypto's `Digest`) iterates
    /// through an array it builds for each iteration; every step of a plan encodes two.
    package var hexString: String { withUnsafeBytes(hexEncoded) }
}

/// Writes the digits straight into the string's storage: one allocation, no array between.
private func hexEncoded(_ bytes: UnsafeRawBufferPointer) -> String {
    String(unsafeUninitializedCapacity: bytes.count * 2) { text in
        let digits: StaticString = "0123456789abcdef"
        digits.withUTF8Buffer { digits in
            for (index, byte) in bytes.enumerated() {
                text[2 * index] = digits[Int(byte >> 4)]
                text[2 * index + 1] = digits[Int(byte & 0x0F)]
            }
        }
        return bytes.count * 2
    }
}
