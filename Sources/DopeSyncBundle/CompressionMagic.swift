import CArchive

/// The compression a stream starts with, recognised by its first bytes. The four
/// docs/bundle-format.md allows, and the others only to name them in an error.
enum CompressionMagic: String, Sendable, CaseIterable {
    case gzip, bzip2, xz, zstd
    case lz4, lzip
    case compress = "compress (.Z)"
    case lzma
    case sevenZip = "7-Zip"
    case rar = "RAR"

    static let sniffLength = 6

    init?(prefix: some Collection<UInt8>) {
        let bytes = Array(prefix.prefix(Self.sniffLength))
        func starts(_ magic: [UInt8]) -> Bool { bytes.starts(with: magic) }
        if starts([0x1F, 0x8B]) {
            self = .gzip
        } else if starts([0x42, 0x5A, 0x68]), bytes.count > 3, (0x31...0x39).contains(bytes[3]) {
            self = .bzip2
        } else if starts([0xFD, 0x37, 0x7A, 0x58, 0x5A, 0x00]) {
            self = .xz
        } else if starts([0x28, 0xB5, 0x2F, 0xFD]) {
            self = .zstd
        } else if starts([0x04, 0x22, 0x4D, 0x18]) {
            self = .lz4
        } else if starts(Array("LZIP".utf8)) {
            self = .lzip
        } else if starts([0x1F, 0x9D]) {
            self = .compress
        } else if starts([0x5D, 0x00, 0x00]) {
            self = .lzma
        } else if starts([0x37, 0x7A, 0xBC, 0xAF, 0x27, 0x1C]) {
            self = .sevenZip
        } else if starts(Array("Rar!".utf8)) {
            self = .rar
        } else {
            return nil
        }
    }

    /// libarchive's code for a filter docs/bundle-format.md allows; nil for the others.
    var allowedFilter: Int32? {
        switch self {
        case .gzip: ARCHIVE_FILTER_GZIP
        case .bzip2: ARCHIVE_FILTER_BZIP2
        case .xz: ARCHIVE_FILTER_XZ
        case .zstd: ARCHIVE_FILTER_ZSTD
        default: nil
        }
    }
}
