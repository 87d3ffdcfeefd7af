import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A fresh folder under the system's temporary folder, removed when the test is done with it.
final class TemporaryFolder {
    let path: String

    init(_ label: String = "checkpoint") throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("\(label)-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }

    func sub(_ name: String) -> String { path + "/" + name }
}

/// Writes `contents` to `path` and sets its mtime.
func writeFile(_ path: String, _ contents: String = "bundle", modified: Date? = nil) throws {
    try Data(contents.utf8).write(to: URL(fileURLWithPath: path))
    if let modified {
        try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: path)
    }
}

func contents(_ path: String) -> String? {
    FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
}

func names(in folder: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
}

func modificationTime(_ path: String) -> Date? {
    var info = stat()
    guard lstat(path, &info) == 0 else { return nil }
    return Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
}
