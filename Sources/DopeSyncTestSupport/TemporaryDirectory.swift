import Foundation

/// A fresh directory under the system's temporary folder, removed when `body` returns.
public func withTemporaryDirectory<T>(
    _ label: String = "dopesync-test",
    _ body: (URL) async throws -> T
) async throws -> T {
    let directory = try makeTemporaryDirectory(label)
    defer { try? FileManager.default.removeItem(at: directory) }  // a leftover in /tmp fails no test
    return try await body(directory)
}

/// A fresh directory for the life of a suite's instance (Swift Testing makes one per test),
/// removed when it goes: for suites whose every test needs one, set up in `init`.
public final class TemporaryFolder {
    public let url: URL
    public var path: String { url.path }

    public init(_ label: String = "dopesync-test") throws { url = try makeTemporaryDirectory(label) }

    deinit { try? FileManager.default.removeItem(at: url) }  // a leftover in /tmp fails no test

    /// The path of `name` inside the folder.
    public func sub(_ name: String) -> String { url.appendingPathComponent(name).path }
}

/// A fresh directory the caller removes.
public func makeTemporaryDirectory(_ label: String = "dopesync-test") throws -> URL {
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("\(label)-\(UUID().uuidString.prefix(8))", isDirectory: true)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    return directory
}

extension URL {
    /// Writes `bytes` to this file, creating parent folders.
    public func write(_ bytes: some Sequence<UInt8>) throws {
        try FileManager.default.createDirectory(at: deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(bytes).write(to: self)
    }
}
