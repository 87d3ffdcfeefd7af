import DopeSyncBundle
import DopeSyncSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// File names are bytes; the worker names bundles with Swift strings (in paths, the checkpoint
/// store, sidecars and logs), which are UTF-8. A producer's file whose name is not UTF-8 would be
/// invisible to a scan that turned it into a string, so the run renames it, once, to a name that
/// is: each byte that is not part of a UTF-8 character written `%XX` (`bad-\xff.tgz` becomes
/// `bad-%FF.tgz`), suffixed if that name is taken. It is then processed like any other bundle.
package enum SpoolNames {
    /// The longest start of `text` of at most `bytes` bytes of UTF-8, cut between characters
    /// (Unicode scalars), so that the cut stays valid UTF-8.
    static func leading<Text: StringProtocol>(_ text: Text, bytes: Int) -> String {
        var kept = ""
        for scalar in text.unicodeScalars {
            guard kept.utf8.count + String(scalar).utf8.count <= bytes else { break }
            kept.unicodeScalars.append(scalar)
        }
        return kept
    }

    /// `bytes` as a UTF-8 string; nil when they are not UTF-8.
    static func utf8(_ bytes: [UInt8]) -> String? {
        String(validating: bytes, as: UTF8.self)
    }

    /// `bytes` with every byte that is not part of a well-formed UTF-8 character written `%XX`.
    static func escaped(_ bytes: [UInt8]) -> String {
        decoded(bytes) { String(format: "%%%02X", $0) }
    }

    /// `bytes` as a person reads them: a byte that is not UTF-8 written `\xNN`, as
    /// ``DisplayText/escaped(_:)`` writes a control character (which it then escapes too).
    static func shown(_ bytes: [UInt8]) -> String {
        DisplayText.escaped(decoded(bytes) { "\\x" + [$0].hexString })
    }

    private static func decoded(_ bytes: [UInt8], writing invalid: (UInt8) -> String) -> String {
        var text = ""
        var parser = Unicode.UTF8.ForwardParser()
        var iterator = bytes.makeIterator()
        var offset = 0
        loop: while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let encoded):
                text.unicodeScalars.append(Unicode.UTF8.decode(encoded))
                offset += encoded.count
            case .error(let length):
                for byte in bytes[offset..<offset + length] { text += invalid(byte) }
                offset += length
            case .emptyInput:
                break loop
            }
        }
        return text
    }
}

extension Spool {
    /// A bundle of `incoming/` renamed because its name was not UTF-8: its old name as a person
    /// reads it (`\xFF`), and the new one.
    public struct RenamedBundle: Sendable, Equatable {
        public let was: String
        /// The name it has now; nil when it could not be renamed (``errno`` says why).
        public let now: String?
        public var errno: Int32? = nil
    }

    /// Renames each of these entries of `incoming/` whose name is not UTF-8 (``SpoolEntry/nameBytes``)
    /// to ``SpoolNames/escaped(_:)``, never replacing a file (a suffix when the name is taken). A
    /// file that cannot be renamed (gone meanwhile, or the folder not writable) is left as it is,
    /// and returned with the error, for the run to say.
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public func renameNonUTF8Names(_ entries: [SpoolEntry]) -> [RenamedBundle] {
        let folder = path(.incoming)
        var renamed: [RenamedBundle] = []
        for bytes in entries.compactMap(\.nameBytes) {
            // Escaping makes a byte three (`%FF`): a name near 255 bytes would no longer fit.
            let base = Self.fittedName(SpoolNames.escaped(bytes))
            let source = (Array((folder + "/").utf8) + bytes + [0]).map { CChar(bitPattern: $0) }
            let shown = SpoolNames.shown(bytes)
            // Never replacing: a producer's file of that name stays, and a suffix is taken.
            do {
                let name = try SpoolFiles.moveNoReplace(bytes: source, shown: shown, toFolder: folder, name: base)
                renamed.append(RenamedBundle(was: shown, now: name))
            } catch  where error.errno != ENOENT {  // gone meanwhile: nothing to say
                renamed.append(RenamedBundle(was: shown, now: nil, errno: error.errno))
            } catch {}
        }
        return renamed
    }
}
