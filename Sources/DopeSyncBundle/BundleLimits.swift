/// The limits a bundle must stay within (docs/bundle-format.md, "Limits").
///
/// The defaults are roomy for phones' real bundles — hundreds of photos of a few MB, which
/// barely compress — and stop a decompression bomb while it is being read, not after.
public struct BundleLimits: Sendable, Hashable, Codable {
    /// Entries of any kind, directories included.
    public var maxEntries: Int = 10_000
    /// Uncompressed bytes of all entries together.
    public var maxTotalBytes: Int64 = 8 << 30
    /// Bytes of `session.json` (and of `manifest.json`).
    public var maxSessionBytes: Int64 = 16 << 20
    /// Unpacked bytes per compressed byte read, checked continuously once
    /// ``ratioCheckAfterBytes`` have been unpacked.
    public var maxCompressionRatio: Double = 100
    public var ratioCheckAfterBytes: Int64 = 16 << 20
    /// Time to read and check a bundle: this many seconds, plus one second per
    /// ``readingBytesPerSecond`` of file. Reading runs at hundreds of MiB/s, so only a hostile or
    /// damaged stream (or a disk failing) comes near it; the bundle then goes to `failed/`.
    public var readingSeconds: Double = 60
    public var readingBytesPerSecond: Int64 = 8 << 20

    public init() {}

    /// The time budget for reading a bundle file of `size` bytes.
    public func readingTime(forFileOfSize size: Int64) -> Duration {
        .seconds(readingSeconds) + .seconds(Double(max(size, 0)) / Double(max(readingBytesPerSecond, 1)))
    }

    public static let `default` = BundleLimits()
}
