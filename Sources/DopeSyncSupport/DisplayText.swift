import Foundation

/// Text from outside (a bundle's name, a server's message, a URL) made safe to show a person:
/// nothing it contains can start a line of its own, move the cursor or hide what follows.
public enum DisplayText {
    /// `text` with every control character (C0, DEL and C1: newlines, ESC, …) written as `\xNN`,
    /// and every invisible format character (Unicode's category Cf: the right-to-left override
    /// U+202E that would show `gpj.exe` as `exe.jpg`, zero-width joiners and spaces) as
    /// `\u{NNNN}`. Everything else is kept as it is.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { isControl($0) || isFormat($0) }) else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            if isControl(scalar) {
                out += "\\x" + [UInt8(scalar.value)].hexString
            } else if isFormat(scalar) {
                out += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Whether `scalar` is an invisible format character (general category Cf).
    public static func isFormat(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.generalCategory == .format
    }

    /// Whether `scalar` is a control character: U+0000–U+001F, U+007F–U+009F.
    public static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }
}

/// A URL as it may be shown: user information (`user:password@`) replaced by `***@`, control
/// characters escaped. For logs, errors and the settings line; never for making a request.
public enum MaskedURL {
    public static func string(_ url: String) -> String {
        DisplayText.escaped(masked(url))
    }

    private static func masked(_ url: String) -> String {
        // scheme://[userinfo@]host…: the authority ends at the first '/', '?' or '#' after "//".
        guard let schemeEnd = url.range(of: "://") else { return url }
        let authorityStart = schemeEnd.upperBound
        let rest = url[authorityStart...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? url.endIndex
        let authority = url[authorityStart..<authorityEnd]
        guard let at = authority.lastIndex(of: "@") else { return url }
        return String(url[..<authorityStart]) + "***" + String(url[at..<url.endIndex])
    }
}
