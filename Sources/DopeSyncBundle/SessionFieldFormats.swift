import DopeSyncSupport

/// The text formats of `session.json`'s string fields: UUIDs, RFC 3339 dates and image file
/// names. Pure functions over UTF-8, no Foundation formatters (whose leniency varies by platform).
package enum SessionFieldFormats {
    /// The lowercase form of an 8-4-4-4-12 hex UUID in either case; nil for anything else
    /// (braces, a `urn:uuid:` prefix, missing hyphens).
    package static func canonicalUUID(_ text: String) -> String? {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return nil }
        for (position, byte) in bytes.enumerated() {
            let isHyphenPosition = position == 8 || position == 13 || position == 18 || position == 23
            guard isHyphenPosition ? byte == UInt8(ascii: "-") : isHexDigit(byte) else { return nil }
        }
        return text.lowercased()
    }

    /// Whether `text` is an RFC 3339 `date-time` (section 5.6) with a real calendar date:
    /// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)`, `T` and `Z` in either case.
    /// A leap second (`:60`) is refused.
    /// The instant an RFC 3339 date-time names, to the millisecond: two texts of one instant
    /// (other offsets, other fractions) are equal. Nil for anything else.
    package static func instant(_ text: String) -> Int64? {
        guard isRFC3339DateTime(text) else { return nil }
        let bytes = Array(text.utf8)
        func number(_ start: Int, _ count: Int) -> Int64 {
            bytes[start..<(start + count)].reduce(0) { $0 * 10 + Int64($1 - 48) }
        }
        let (year, month, day) = (number(0, 4), number(5, 2), number(8, 2))
        let (hour, minute, second) = (number(11, 2), number(14, 2), number(17, 2))
        var index = 19
        var milliseconds: Int64 = 0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            var scale: Int64 = 100
            while index < bytes.count, (48...57).contains(bytes[index]) {
                milliseconds += Int64(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
        }
        var offsetMinutes: Int64 = 0
        if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
            let sign: Int64 = bytes[index] == UInt8(ascii: "-") ? -1 : 1
            offsetMinutes = sign * (number(index + 1, 2) * 60 + number(index + 4, 2))
        }
        // Days from the civil date (Howard Hinnant's algorithm), then seconds.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetMinutes * 60
        return seconds * 1000 + milliseconds
    }

    static func isRFC3339DateTime(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        func number(at start: Int, digits: Int) -> Int? {
            guard start + digits <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[start..<(start + digits)] {
                guard isDigit(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        func byte(at position: Int, isOneOf allowed: String) -> Bool {
            position < bytes.count && allowed.utf8.contains(bytes[position])
        }
        guard let year = number(at: 0, digits: 4), byte(at: 4, isOneOf: "-"),
            let month = number(at: 5, digits: 2), byte(at: 7, isOneOf: "-"),
            let day = number(at: 8, digits: 2), byte(at: 10, isOneOf: "Tt"),
            let hour = number(at: 11, digits: 2), byte(at: 13, isOneOf: ":"),
            let minute = number(at: 14, digits: 2), byte(at: 16, isOneOf: ":"),
            let second = number(at: 17, digits: 2)
        else { return false }
        var position = 19
        if byte(at: position, isOneOf: ".") {
            position += 1
            let fractionStart = position
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
            guard position > fractionStart else { return false }
        }
        if byte(at: position, isOneOf: "Zz") {
            position += 1
        } else if byte(at: position, isOneOf: "+-") {
            guard let offsetHour = number(at: position + 1, digits: 2), byte(at: position + 3, isOneOf: ":"),
                let offsetMinute = number(at: position + 4, digits: 2),
                offsetHour <= 23, offsetMinute <= 59
            else { return false }
            position += 6
        } else {
            return false
        }
        return position == bytes.count
            && (1...12).contains(month) && (1...daysIn(month: month, year: year)).contains(day)
            && hour <= 23 && minute <= 59 && second <= 59
    }

    /// Why `name` is not a plain image file name, or nil when it is one.
    static func fileNameProblem(_ name: String) -> FileNameProblem? {
        if name.isEmpty || name == "." || name == ".."
            || name.utf8.contains(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "\\") || $0 == 0 })
        {
            return .notPlain
        }
        // A name goes into a multipart part's headers and into logs: a CR/LF there would forge
        // header lines, an ESC would rewrite a terminal.
        if name.unicodeScalars.contains(where: DisplayText.isControl) { return .controlCharacter }
        return name.utf8.count > FileSystem.maxNameBytes ? .tooLong : nil
    }

    enum FileNameProblem {
        case notPlain
        case controlCharacter
        case tooLong
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        isDigit(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }
}
