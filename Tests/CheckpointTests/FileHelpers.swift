import Foundation

#if canImport(Glibc)
    import Glibc
#endif

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

func modificationTime(_ path: String) -> Date? {
    var info = stat()
    guard lstat(path, &info) == 0 else { return nil }
    return Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
}
