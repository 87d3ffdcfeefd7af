/// Durations as operators type them: `500ms`, `30s`, `10m`, `1h`, `2d`, or plain seconds.
public enum DurationText {
    public static let examples = "e.g. 500ms, 30s, 10m, 1h, 2d"

    public static func parse(_ text: String) -> Duration? {
        let units: [(suffix: String, seconds: Double)] = [
            ("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400),
        ]
        // "5ms" also ends in "s": only the unit whose remaining text is a number counts.
        let seconds =
            units.lazy.filter { text.hasSuffix($0.suffix) }
            .compactMap { unit in Double(text.dropLast(unit.suffix.count)).map { $0 * unit.seconds } }
            .first ?? Double(text)
        // Up to about 30 years; beyond that (or inf, nan, negative) is a typo, not a setting.
        guard let seconds, seconds >= 0, seconds < 1e9 else { return nil }
        return .milliseconds(Int64((seconds * 1000).rounded()))
    }
}
