import DopeSyncBundle
import DopeSyncSupport
import Foundation
import ThreadRules

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// How much free space the spool's file system must keep (`min-free-space`): below it a run
/// claims nothing, since the checkpoint database could not be written (every run would exit 73
/// and uploads would stop for everyone) and producers could not drop bundles.
public enum FreeSpaceFloor: Sendable, Hashable, CustomStringConvertible {
    case bytes(Int64)
    /// A percentage of the file system's size.
    case percent(Double)

    /// 1 GiB.
    public static let `default` = FreeSpaceFloor.bytes(1 << 30)

    /// `1GiB`, `500MB`, `5%`; nil for anything else.
    public static func parse(_ text: String) -> FreeSpaceFloor? {
        let text = text.trimmingCharacters(in: .whitespaces)
        if text.hasSuffix("%") {
            guard let value = Double(text.dropLast().trimmingCharacters(in: .whitespaces)), (0...100).contains(value)
            else { return nil }
            return .percent(value)
        }
        if text == "0" { return .bytes(0) }
        return ByteRate.parse(text).map(FreeSpaceFloor.bytes)
    }

    /// The floor in bytes on a file system of `total` bytes.
    public func bytes(ofTotal total: Int64) -> Int64 {
        switch self {
        case .bytes(let bytes): bytes
        case .percent(let percent): Int64((Double(total) * percent / 100).rounded(.up))
        }
    }

    public var description: String {
        switch self {
        case .bytes(let bytes): "\(ByteCount(bytes))"
        case .percent(let percent): "\(percent.formatted())%"
        }
    }
}

/// The free and total bytes of the file system that holds a folder (`statvfs`), as an
/// unprivileged user can use them (`f_bavail`).
public struct FileSystemSpace: Sendable, Hashable {
    public var free: Int64
    public var total: Int64

    public init(free: Int64, total: Int64) {
        self.free = free
        self.total = total
    }

    /// Nil when the folder cannot be asked (it does not exist): nothing to judge.
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public init?(of folder: String) {
        BlockingCalls.check("spool: statvfs of \(folder)")
        var info = statvfs()
        guard statvfs(folder, &info) == 0 else { return nil }
        free = Int64(info.f_bavail) * Int64(info.f_frsize)
        total = Int64(info.f_blocks) * Int64(info.f_frsize)
    }

    public func isBelow(_ floor: FreeSpaceFloor) -> Bool { free < floor.bytes(ofTotal: total) }
}
