#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Whether a fixed byte sequence occurs in a stream read chunk by chunk, a match spanning two
/// chunks included. Keeps the last `pattern.count - 1` bytes seen, nothing more.
package struct StreamingSearch: Sendable {
    let pattern: [UInt8]
    /// The stream's last bytes, fewer than the pattern: where a match across chunks would start.
    private var carry: [UInt8] = []
    package private(set) var found = false

    package init(_ pattern: [UInt8]) {
        precondition(!pattern.isEmpty, "an empty pattern is everywhere")
        self.pattern = pattern
    }

    package init(_ pattern: String) { self.init(Array(pattern.utf8)) }

    /// Looks at the stream's next bytes.
    package mutating func update(_ chunk: UnsafeRawBufferPointer) {
        guard !found, !chunk.isEmpty else { return }
        let keep = pattern.count - 1
        if !carry.isEmpty {
            let junction = carry + chunk.prefix(keep)
            if junction.withUnsafeBytes(contains) {
                found = true
                return
            }
        }
        if contains(chunk) {
            found = true
            return
        }
        carry = chunk.count >= keep ? Array(chunk.suffix(keep)) : Array((carry + chunk).suffix(keep))
    }

    package mutating func update(_ bytes: [UInt8]) { bytes.withUnsafeBytes { update($0) } }

    /// memchr for the first byte, memcmp for the rest (memmem is a GNU extension Swift's Glibc
    /// module does not export).
    private func contains(_ buffer: UnsafeRawBufferPointer) -> Bool {
        guard buffer.count >= pattern.count, let base = buffer.baseAddress else { return false }
        return pattern.withUnsafeBytes { needle in
            let first = Int32(needle[0])
            let lastStart = buffer.count - needle.count
            var offset = 0
            while offset <= lastStart {
                guard let hit = memchr(base + offset, first, lastStart - offset + 1) else { return false }
                let start = base.distance(to: UnsafeRawPointer(hit))
                if memcmp(hit, needle.baseAddress!, needle.count) == 0 { return true }
                offset = start + 1
            }
            return false
        }
    }
}
