import DopeSync
import Foundation
import Testing

/// Each exit code, setting and failure reason the code knows is documented where an operator
/// looks it up: the reference pages in docs/ and the man page (issue 36: the man page is written
/// by hand, so it is checked against the code's own lists here).
@Suite struct ReferenceDocsTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func read(_ path: String) throws -> String {
        try String(contentsOf: repository.appendingPathComponent(path), encoding: .utf8)
    }

    /// The man page's text with roff's escaped hyphens as plain ones.
    static func manPage() throws -> String {
        try read("docs/dopesync.1").replacingOccurrences(of: "\\-", with: "-")
    }

    @Test("every exit code is in docs/exit-codes.md's table and in the man page's EXIT STATUS table")
    func exitCodes() throws {
        let reference = try Self.read("docs/exit-codes.md")
        let man = try Self.manPage()
        let exitStatus = try #require(man.range(of: ".SH \"EXIT STATUS\"")).upperBound
        let manTable = man[exitStatus...]
        for code in ExitStatus.all {
            #expect(reference.contains("| \(code) |"), "docs/exit-codes.md has no row for \(code)")
            #expect(manTable.contains("\n\(code)|"), "the man page's EXIT STATUS has no row for \(code)")
        }
    }

    @Test("every job-file key is in docs/job-file.md's table and in the man page, with its environment variable")
    func settings() throws {
        let reference = try Self.read("docs/job-file.md")
        let man = try Self.manPage()
        for setting in RunSetting.all {
            #expect(reference.contains("| `\(setting.key)` |"), "docs/job-file.md has no row for \(setting.key)")
            #expect(
                reference.contains(setting.environmentVariable), "docs/job-file.md lacks \(setting.environmentVariable)"
            )
            #expect(man.contains("\(setting.key):"), "the man page's JOB FILE lacks \(setting.key)")
            #expect(man.contains(setting.environmentVariable), "the man page lacks \(setting.environmentVariable)")
        }
    }

    @Test("every named failure reason is in docs/spool.md's table of reasons and in the man page")
    func failureReasons() throws {
        let reference = try Self.read("docs/spool.md")
        let man = try Self.manPage()
        for reason in FailureReason.named {
            #expect(reference.contains("`\(reason)`"), "docs/spool.md does not name \(reason)")
            #expect(man.contains(reason.rawValue), "the man page does not name \(reason)")
        }
    }
}
