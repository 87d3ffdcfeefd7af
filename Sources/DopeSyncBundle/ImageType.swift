/// The image types a bundle may carry, recognised by their first bytes — never by the file name.
public enum ImageType: String, Sendable, Hashable, Codable, CaseIterable {
    case jpeg
    case png
    case heic
    case webp

    /// The upload's Content-Type.
    public var contentType: String {
        switch self {
        case .jpeg: "image/jpeg"
        case .png: "image/png"
        case .heic: "image/heic"
        case .webp: "image/webp"
        }
    }

    /// How many leading bytes ``init(sniffing:)`` needs.
    public static let sniffLength = 16

    /// Recognises an image from its first bytes; nil for anything else.
    public init?(sniffing bytes: some Collection<UInt8>) {
        let prefix = Array(bytes.prefix(Self.sniffLength))
        func has(_ magic: [UInt8], at offset: Int = 0) -> Bool {
            prefix.count >= offset + magic.count && Array(prefix[offset..<offset + magic.count]) == magic
        }
        if has([0xFF, 0xD8, 0xFF]) {
            self = .jpeg
        } else if has([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) {
            self = .png
        } else if has(Array("RIFF".utf8)) && has(Array("WEBP".utf8), at: 8) {
            self = .webp
        } else if has(Array("ftyp".utf8), at: 4), prefix.count >= 12,
            Self.heifBrands.contains(String(decoding: prefix[8..<12], as: UTF8.self))
        {
            // ISO-BMFF: a `ftyp` box first, whose major brand says HEIF/HEIC.
            self = .heic
        } else {
            return nil
        }
    }

    private static let heifBrands: Set<String> = ["heic", "heix", "hevc", "hevx", "heim", "heis", "mif1", "msf1"]
}
