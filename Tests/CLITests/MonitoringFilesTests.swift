import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync
@testable import DopeSyncStore

/// jobs/prometheus/dopesync.rules.yml, its promtool tests and jobs/grafana/dopesync-dashboard.json:
/// every metric they name is one the worker writes, so a renamed metric cannot leave an alert that
/// never fires or a panel that stays empty; and promtool, where installed, runs the rules' tests.
@Suite struct MonitoringFilesTests {
    static let rules = packageRoot() + "/jobs/prometheus/dopesync.rules.yml"
    static let ruleTests = packageRoot() + "/jobs/prometheus/dopesync.rules.test.yml"
    static let dashboard = packageRoot() + "/jobs/grafana/dopesync-dashboard.json"

    static let promtool: String? = (ProcessInfo.processInfo.environment["PATH"] ?? "")
        .split(separator: ":").map { "\($0)/promtool" }.first(where: FileManager.default.isExecutableFile)

    /// A metrics file with every optional part filled (free space and the floor, a last success,
    /// half sessions, synced bundles), so every metric the worker can write is in it.
    static func writtenText() throws -> String {
        let now = Date()
        var backlog = SpoolBacklog(
            listings: [:],
            folders: Dictionary(
                uniqueKeysWithValues: ["tmp", "incoming", "processing", "done", "failed"].map {
                    ($0, SpoolStatus.Folder(count: 1, bytes: 1024, oldestAgeSeconds: 60))
                }),
            inFlight: [:])
        backlog.space = FileSystemSpace(free: 10 << 30, total: 100 << 30)
        var metrics = RunMetrics(
            finishedAt: now, lastSuccessAt: now.addingTimeInterval(-300),
            summary: RunSummary(claimed: 2, done: 1, failed: 1, exitCode: 1), backlog: backlog, floor: .default)
        metrics.halfSessions = [
            SpoolStatus.HalfSessionEntry(
                name: "a.tar.gz", folder: "incoming", session: "a", recordsOnServer: 1, recordsLeft: 49,
                since: now.addingTimeInterval(-600), ageSeconds: 600)
        ]
        metrics.syncSeconds = [3, 120]
        // A metric written only when its property is set would be missed: every optional must be set.
        for child in Mirror(reflecting: metrics).children {
            let value = Mirror(reflecting: child.value)
            if value.displayStyle == .optional && value.children.isEmpty {
                Issue.record(
                    "RunMetrics.\(child.label ?? "?") is nil here: set it, so the metrics it writes are listed")
            }
        }
        return metrics.text()
    }

    /// The names a Prometheus query may use for what the worker writes: each `# TYPE` line's name,
    /// and a histogram's `_bucket`, `_sum` and `_count`.
    static func writtenNames(_ text: String) -> Set<String> {
        var names: Set<String> = []
        for line in text.split(separator: "\n") where line.hasPrefix("# TYPE ") {
            let fields = line.split(separator: " ")
            guard fields.count == 4 else { continue }
            let name = String(fields[2])
            names.insert(name)
            if fields[3] == "histogram" { names.formUnion(["_bucket", "_sum", "_count"].map { name + $0 }) }
        }
        return names
    }

    static func namesUsed(in path: String) throws -> [String] {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let names = text.matches(of: /dopesync_[a-z_]+/).map { String($0.output) }
        return Array(Set(names)).sorted()
    }

    @Test(
        "every metric the rules, their tests and the dashboard name is one the worker writes",
        arguments: [rules, ruleTests, dashboard])
    func monitoringFilesNameOnlyWrittenMetrics(path: String) throws {
        let written = Self.writtenNames(try Self.writtenText())
        #expect(written.contains("dopesync_last_run_exit_code"), "\(written.sorted())")
        let used = try Self.namesUsed(in: path)
        #expect(!used.isEmpty, "\(path) names no dopesync_ metric")
        let unwritten = used.filter { !written.contains($0) }
        #expect(
            unwritten.isEmpty,
            "\((path as NSString).lastPathComponent) uses metrics the worker does not write: \(unwritten)")
    }

    @Test(
        "the folder and outcome labels the rules, their tests and the dashboard select are ones the worker writes",
        arguments: [rules, ruleTests, dashboard])
    func monitoringFilesSelectWrittenLabelValues(path: String) throws {
        let text = try Self.writtenText()
        let file = try String(contentsOfFile: path, encoding: .utf8)
        let selected = file.matches(of: /(folder|outcome)=\\?"([a-z]+)\\?"/)
        #expect(!selected.isEmpty, "\(path) selects no folder or outcome")
        for match in selected {
            let sample = "\(match.output.1)=\"\(match.output.2)\""
            #expect(text.contains("{\(sample)}"), "\((path as NSString).lastPathComponent) selects \(sample)")
        }
    }

    @Test("the dashboard is JSON whose every panel query names a metric")
    func dashboardQueriesNameMetrics() throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: Self.dashboard))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        #expect(panels.count >= 10)
        for panel in panels {
            let targets = panel["targets"] as? [[String: Any]] ?? []
            #expect(!targets.isEmpty, "panel \(panel["title"] ?? "?") has no query")
            for target in targets {
                let expr = target["expr"] as? String ?? ""
                #expect(expr.contains(/dopesync_[a-z_]+/), "panel \(panel["title"] ?? "?"): \(expr)")
            }
        }
    }

    // Where promtool is missing these are reported as skipped, not passed (`make rules-test`
    // installs it: Debian's prometheus package).
    @Test("promtool check rules accepts the rule file", .enabled(if: promtool != nil, "promtool is not on PATH"))
    func promtoolChecksTheRules() async throws {
        let result = try await runProcess(
            try #require(Self.promtool), ["check", "rules", Self.rules], allowFailure: true)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
    }

    @Test(
        "promtool test rules: every alert fires and clears as its tests expect",
        .enabled(if: promtool != nil, "promtool is not on PATH"))
    func promtoolRunsTheRuleTests() async throws {
        let result = try await runProcess(
            try #require(Self.promtool), ["test", "rules", Self.ruleTests], allowFailure: true)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
    }
}
