/// Where a value sits in a JSON document, rendered the way people write it:
/// `groupEntries[2].measurement.bulletDiameter`; the root renders as the empty string.
public struct JSONPath: Sendable, Hashable, CustomStringConvertible {
    public enum Component: Sendable, Hashable {
        case key(String)
        case index(Int)
    }

    public var components: [Component]

    public init(_ components: [Component] = []) {
        self.components = components
    }

    public static let root = JSONPath()

    public var isRoot: Bool { components.isEmpty }

    public func appending(_ key: String) -> JSONPath {
        JSONPath(components + [.key(key)])
    }

    public func appending(index: Int) -> JSONPath {
        JSONPath(components + [.index(index)])
    }

    public var description: String {
        var text = ""
        for component in components {
            switch component {
            case .index(let index):
                text += "[\(index)]"
            case .key(let key) where Self.isPlainKey(key):
                text += text.isEmpty ? key : ".\(key)"
            case .key(let key):
                // A key with dots, brackets or spaces would make the path ambiguous: quote it.
                text += "[\(String(decoding: JSONValue.string(key).serialized(), as: UTF8.self))]"
            }
        }
        return text
    }

    private static func isPlainKey(_ key: String) -> Bool {
        !key.isEmpty
            && key.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                    || byte == UInt8(ascii: "_")
            }
    }
}
