import DopeSync
import DopeSyncStore
import Foundation
import Testing

/// Each exit code, setting and failure reason the code knows is documented where an operator
/// looks it up: the reference pages in docs/ and the man page (issue 36: the man page is written
/// by hand, so it is checked against the code's own lists here). And what the code's comments
/// cite is in the repository: a file that ships, a benchmark entry BENCHMARKS.md holds.
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

    @Test("every environment variable the worker's code reads is in docs/job-file.md and in the man page")
    func environmentVariables() throws {
        let reference = try Self.read("docs/job-file.md")
        let man = try Self.manPage()
        // Read from the code, not from a list kept beside it: a variable added without its docs
        // fails here. The dev server's, the benchmark's and the tests' own are documented elsewhere.
        let notTheWorkers = ["DopeSyncDevServer", "dopesync-devserver", "dopesync-bench", "DopeSyncTestSupport"]
        let sources = Self.repository.appendingPathComponent("Sources")
        let files = try #require(FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil))
            .compactMap { $0 as? URL }
            .filter { file in
                file.pathExtension == "swift" && !notTheWorkers.contains { file.path.contains("/Sources/\($0)/") }
            }
        let variable = try Regex(#""(DOPESYNC_[A-Z0-9_]+)""#)
        var variables: Set<String> = []
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            for match in text.matches(of: variable) {
                variables.insert(String(try #require(match.output[1].substring)))
            }
        }
        #expect(variables.isSuperset(of: ["DOPESYNC_API_TOKEN", "DOPESYNC_HOST", "DOPESYNC_DATABASE_PASSWORD"]))
        let section = man[try #require(man.range(of: ".SH ENVIRONMENT\n")).upperBound...]
        let environment = section[..<(section.range(of: "\n.SH ")?.lowerBound ?? section.endIndex)]
        for name in variables.union(RunSetting.all.map(\.environmentVariable)).sorted() {
            #expect(reference.contains("`\(name)`"), "docs/job-file.md does not name \(name)")
            #expect(environment.contains(".B \(name)\n"), "the man page's ENVIRONMENT has no entry for \(name)")
        }
    }

    @Test("the deferral rules docs/spool.md states, and the man page repeats, are the code's")
    func deferralRules() throws {
        let policy = DeferralPolicy()
        let attempts = try #require(policy.maxAttempts)
        let days = Int(try #require(policy.maxAge) / .seconds(86_400))
        let (first, last) = (Int(policy.base / .seconds(60)), Int(policy.cap / .seconds(3600)))
        #expect((policy.factor, policy.delay(afterAttempt: 2)) == (2, policy.base * 2), "the back-off doubles")
        let spool = Self.normalized(try Self.read("docs/spool.md"))
        let man = Self.normalized(try Self.manPage())
        // Each found or not first, so that a failure names the document, not its whole text.
        for (text, name) in [(spool, "docs/spool.md"), (man, "the man page")] {
            let rules = [
                "the first delay": "due \(first) minute later, then 2, 4, ",
                "the longest delay": " up to \(last) hour apart",
                "the limits": "after \(attempts) attempts, or \(days) days after dopesync first saw",
            ]
            for (rule, phrase) in rules {
                let stated = text.lowercased().contains(phrase.lowercased())
                #expect(stated, "\(name) does not say \(rule) as the code has it: \"\(phrase)\"")
            }
        }
        let gaveUp = man.contains("Deferred \(attempts) times or for \(days) days")
        #expect(gaveUp, "the man page's gave_up does not say \(attempts) times or \(days) days")
    }

    @Test("comments cite files that ship, and every BENCHMARKS.md entry they quote is in it")
    func commentsCiteWhatShips() throws {
        let benchmarks = Self.normalized(try Self.read("BENCHMARKS.md"))
        let files = try ["Sources", "Tests", "Fuzz"].flatMap { folder in
            let url = Self.repository.appendingPathComponent(folder)
            return try #require(FileManager.default.enumerator(at: url, includingPropertiesForKeys: nil))
                .compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" }
        }
        #expect(files.count > 200, "Swift files read under \(Self.repository.path)")
        // Not `\b`: Swift's default word boundary finds none between a name and its `'s`.
        let citedFile = try Regex(#"[A-Za-z0-9_/-]+\.(md|yaml)(?![A-Za-z0-9_])"#)
        let quotedEntry = try Regex(#"BENCHMARKS\.md, "([^"]+)""#)
        var (citations, quotes) = (0, 0)
        for file in files {
            let name = file.path.dropFirst(Self.repository.path.count + 1)
            let comments = Self.commentText(of: try String(contentsOf: file, encoding: .utf8))
            for match in comments.matches(of: citedFile) {
                let cited = String(comments[match.range])
                let ships = FileManager.default.fileExists(atPath: Self.repository.appendingPathComponent(cited).path)
                #expect(ships, "\(name) cites \(cited), which does not ship")
                citations += 1
            }
            for match in comments.matches(of: quotedEntry) {
                let quoted = Self.normalized(String(try #require(match.output[1].substring)))
                let held = benchmarks.contains(quoted)
                #expect(held, "\(name) quotes \"\(quoted)\" of BENCHMARKS.md, which lacks it")
                quotes += 1
            }
        }
        // What the comments cite today: the checks above ran, and no change of style hid them.
        #expect(citations > 40 && quotes > 5, "\(citations) files cited, \(quotes) BENCHMARKS.md entries quoted")
    }

    /// The text of a file's whole-line comments, joined by spaces: a citation may wrap.
    static func commentText(of source: String) -> String {
        source.split(separator: "\n").compactMap { line -> Substring? in
            let code = line.drop { $0 == " " }
            guard code.hasPrefix("//") else { return nil }
            return code.drop { $0 == "/" }.drop { $0 == " " }
        }.joined(separator: " ")
    }

    /// `text` with every run of white space as one space.
    static func normalized(_ text: String) -> String {
        text.split(whereSeparator: \.isWhitespace).joined(separator: " ")
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
