import Foundation

/// Upload rates as operators type them: `500KiB/s`, `2MB/s`, `1.5MiB/s`, `800kB/s`, or plain
/// bytes per second. `k`/`K` is 1000 and `Ki` 1024, as in `ByteCount`'s output; `/s` is optional.
public enum ByteRate {
    public static let examples = "e.g. 500KiB/s, 2MB/s, 1MiB/s"

    /// Bytes per second, or nil for anything else (zero included: a cap of nothing is a typo).
    public static func parse(_ text: String) -> Int64? {
        var text = Substring(text.trimmingCharacters(in: .whitespaces))
        if text.hasSuffix("/s") { text = text.dropLast(2) }
        let units: [(suffix: String, bytes: Double)] = [
            ("KiB", 1024), ("MiB", 1024 * 1024), ("GiB", 1024 * 1024 * 1024), ("TiB", 1024 * 1024 * 1024 * 1024),
            ("kB", 1000), ("KB", 1000), ("MB", 1_000_000), ("GB", 1_000_000_000), ("TB", 1_000_000_000_000),
            ("B", 1),
        ]
        var multiplier = 1.0
        // Longest suffixes first, so "KiB" is not read as "B".
        if let unit = units.first(where: { text.hasSuffix($0.suffix) }) {
            text = text.dropLast(unit.suffix.count)
            multiplier = unit.bytes
        }
        guard let number = Double(text.trimmingCharacters(in: .whitespaces)), number.isFinite, number > 0 else {
            return nil
        }
        let bytes = (number * multiplier).rounded()
        guard bytes >= 1, bytes < 1e15 else { return nil }
        return Int64(bytes)
    }

    /// `1.5 MiB/s`, for the log, the progress line and the summary.
    public static func text(_ bytesPerSecond: Double) -> String {
        "\(ByteCount(Int64(bytesPerSecond.rounded())))/s"
    }
}

/// A byte count for people: `16 MiB`, `1.5 GiB`, `900 B`.
package struct ByteCount: CustomStringConvertible, Sendable {
    var bytes: Int64
    package init(_ bytes: Int64) { self.bytes = bytes }

    package var description: String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        if unit == 0 { return "\(bytes) B" }
        let rounded = (value * 10).rounded() / 10
        return rounded == rounded.rounded() ? "\(Int(rounded)) \(units[unit])" : "\(rounded) \(units[unit])"
    }
}
