import CArchive
import DopeSyncSupport

#if canImport(Glibc)
    import Glibc
#endif

/// What kind of thing an archive entry is. Only regular files and directories are acceptable in
/// a bundle; everything else is named so the error can say what was found.
enum ArchiveEntryKind: String, Sendable {
    case regularFile = "regular file"
    case directory
    case symbolicLink = "symbolic link"
    case hardLink = "hard link"
    case characterDevice = "character device"
    case blockDevice = "block device"
    case fifo = "FIFO"
    case socket
    case unknown = "unknown entry type"
}

/// One entry's header, as read from the archive (the path is not yet normalised).
package struct ArchiveEntryHeader: Sendable {
    /// The entry's name as UTF-8 text; when it is not valid UTF-8, its bytes escaped (`\xfc`).
    var rawPath: String
    /// Why the name cannot be used (not UTF-8, or unreadable); the entry is then refused.
    var nameError: BundleError?
    var kind: ArchiveEntryKind
    /// The size the header declares, when it declares one (zip streams may not).
    var declaredSize: Int64?
    var isEncrypted: Bool
}

extension ArchiveEntryHeader {
    /// Reads `entry`'s header; `index` (from 1) names an entry whose name cannot be read, and
    /// `warning` is libarchive's, if it gave one with the header.
    init(entry: OpaquePointer, index entryIndex: Int, warning: String?) {
        let rawPath: String
        var nameError: BundleError? = nil
        if let name = archive_entry_pathname(entry) {
            let bytes = UnsafeRawBufferPointer(start: name, count: strlen(name))
            if let text = String(validating: bytes, as: UTF8.self) {
                rawPath = text
            } else {
                rawPath = EntryName.escaped(bytes)
                nameError = BundleError(
                    .invalidEntryName, culprit: rawPath,
                    message:
                        "this entry's name is not valid UTF-8 (bytes that are not are shown as \\xNN); rename the file and pack the bundle again"
                )
            }
        } else {
            // A name flagged UTF-8 (zip) or given in a pax header that is not valid UTF-8:
            // libarchive cannot decode it and keeps none, so the entry can only be named by position.
            rawPath = "entry \(entryIndex)"
            nameError = BundleError(
                .invalidEntryName, culprit: rawPath,
                message: "the name of the archive's entry number \(entryIndex) is marked UTF-8 but is not valid UTF-8"
                    + (warning.map { " (libarchive: \($0))" } ?? ""))
        }
        let kind: ArchiveEntryKind
        if archive_entry_hardlink(entry) != nil {
            kind = .hardLink
        } else {
            switch UInt32(archive_entry_filetype(entry)) & Self.fileTypeMask {
            case 0o100000: kind = .regularFile
            case 0o040000: kind = .directory
            case 0o120000: kind = .symbolicLink
            case 0o020000: kind = .characterDevice
            case 0o060000: kind = .blockDevice
            case 0o010000: kind = .fifo
            case 0o140000: kind = .socket
            default: kind = .unknown
            }
        }
        let size: Int64? = archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : nil
        self.init(
            rawPath: rawPath,
            nameError: nameError,
            kind: kind,
            declaredSize: size,
            isEncrypted: archive_entry_is_encrypted(entry) != 0
        )
    }

    // AE_IFMT: libarchive's macros are casts, which Swift does not import.
    private static let fileTypeMask: UInt32 = 0o170000
}

/// Entry names for people.
enum EntryName {
    /// The name's bytes as text: printable ASCII as it is, every other byte as `\xNN`.
    static func escaped(_ bytes: some Sequence<UInt8>) -> String {
        var text = ""
        for byte in bytes {
            if (0x20..<0x7F).contains(byte) && byte != UInt8(ascii: "\\") {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                text += "\\x" + [byte].hexString
            }
        }
        return text
    }
}
