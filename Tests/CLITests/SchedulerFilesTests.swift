import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

/// jobs/systemd/dopesync.service, dopesync.timer and jobs/cron.example: systemd itself checks the
/// units (`systemd-analyze verify`), and the command lines they hold are run with the built binary,
/// so a renamed option cannot leave them broken.
@Suite struct SchedulerFilesTests {
    /// `[Section]` → key → values (a key may repeat, as `ReadWritePaths=` does).
    static func parseUnit(_ path: String) throws -> [String: [String: [String]]] {
        var sections: [String: [String: [String]]] = [:]
        var current: String?
        for (number, raw) in try String(contentsOfFile: path, encoding: .utf8).split(
            separator: "\n", omittingEmptySubsequences: false
        ).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                current = String(line.dropFirst().dropLast())
                continue
            }
            guard let section = current, let equals = line.firstIndex(of: "=") else {
                Issue.record("\(path):\(number + 1): not a `Key=Value` line inside a section: \(line)")
                continue
            }
            sections[section, default: [:]][String(line[..<equals]), default: []].append(
                String(line[line.index(after: equals)...]))
        }
        return sections
    }

    static let unitFolder = packageRoot() + "/jobs/systemd"

    static let systemdAnalyze = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"].first(
        where: FileManager.default.isExecutableFile)

    // Where systemd-analyze is missing this test is reported as skipped, not passed; the
    // structural checks of the next tests run everywhere.
    /// Every unit the package ships: the run, its timer, the path unit, the prune service and timer.
    static let units = [
        "dopesync.service", "dopesync.timer", "dopesync.path", "dopesync-prune.service", "dopesync-prune.timer",
    ]

    @Test(
        "systemd-analyze verify accepts every unit (run, timer, path, prune service and timer) without a warning",
        .enabled(if: systemdAnalyze != nil))
    func systemdVerify() async throws {
        let analyze = try #require(Self.systemdAnalyze)
        try await withTemporaryDirectory { directory in
            // The units name /usr/local/bin/dopesync; verify checks that ExecStart's program exists.
            for unit in Self.units {
                let text = try String(contentsOfFile: Self.unitFolder + "/" + unit, encoding: .utf8)
                    .replacingOccurrences(of: "/usr/local/bin/dopesync", with: builtProduct("dopesync").path)
                try text.write(to: directory.appendingPathComponent(unit), atomically: true, encoding: .utf8)
            }
            let result = try await runProcess(analyze, ["verify"] + Self.units, in: directory, allowFailure: true)
            #expect(result.status == 0, "\(result.stderr)")
            // Unknown keys are only warnings to systemd ("ignoring"): a typo in a sandboxing option
            // would silently switch it off, so any output fails the test.
            #expect(result.stderr.isEmpty, "\(result.stderr)")
        }
    }

    @Test("the timer fires every 5 minutes, catches up after downtime and spreads a fleet's starts")
    func timerSchedule() throws {
        let timer = try Self.parseUnit(Self.unitFolder + "/dopesync.timer")
        #expect(timer["Timer"]?["OnCalendar"] == ["*:0/5"])
        #expect(timer["Timer"]?["Persistent"] == ["true"])
        #expect(timer["Timer"]?["RandomizedDelaySec"]?.isEmpty == false)
        #expect(timer["Timer"]?["Unit"] == ["dopesync.service"])
        #expect(timer["Install"]?["WantedBy"] == ["timers.target"])
    }

    /// Without systemd here to run them, the units are read: the rules that re-date times stored
    /// under a wrong clock act only once the kernel calls the clock synchronized (`adjtimex`,
    /// denied by `ProtectClock=` and by `~@privileged` unless allowed again after it), and a first
    /// sight before NTP is stamped with the boot's id (`/proc/sys/kernel/random/boot_id`, hidden
    /// by `ProcSubset=pid`). With either missing, a kiosk's bundles were given up as days old.
    @Test(
        "the worker's and prune's sandboxes let them read whether NTP keeps the clock (adjtimex) and the boot's id",
        arguments: ["dopesync.service", "dopesync-prune.service"])
    func sandboxesReadTheClocksState(unit name: String) throws {
        let service = try #require(try Self.parseUnit(Self.unitFolder + "/" + name)["Service"])
        #expect(service["ProtectClock"] == nil, "ProtectClock= denies adjtimex")
        #expect(service["ProcSubset"] == nil, "ProcSubset=pid hides /proc/sys/kernel/random/boot_id")
        #expect(service["CapabilityBoundingSet"] == [""], "the clock cannot be set: no CAP_SYS_TIME")
        let filters = service["SystemCallFilter"] ?? []
        let denied = try #require(filters.lastIndex { $0.hasPrefix("~") && $0.contains("@privileged") })
        let allowedAgain = filters.indices.filter { $0 > denied }.flatMap { filters[$0].split(separator: " ") }
        for call in ["adjtimex", "clock_adjtime"] {
            #expect(allowedAgain.contains(Substring(call)), "\(call) allowed after ~@privileged: \(filters)")
        }
    }

    @Test("the service is a oneshot run as an unprivileged user in a sandbox, and its command line works")
    func serviceRunsTheBinary() async throws {
        let unit = try Self.parseUnit(Self.unitFolder + "/dopesync.service")
        let service = try #require(unit["Service"])
        #expect(service["Type"] == ["oneshot"])
        #expect(service["User"] == ["dopesync"])
        for (key, value) in [
            ("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("ProtectHome", "yes"), ("PrivateTmp", "yes"),
        ] {
            #expect(service[key] == [value], "\(key)")
        }
        #expect(service["KillSignal"] == ["SIGTERM"], "dopesync gives bundles back on SIGTERM")

        let execStart = try #require(service["ExecStart"]?.first)
        try await withTemporaryDirectory { directory in
            // The API the unit's token file holds a token for: an idle run checks it.
            var api = DevServerConfiguration()
            api.token = "token"
            try await withDevServer(api) { server in
                // Run exactly those arguments: %d is systemd's credentials folder, and the environment
                // points the production job at a scratch spool and the dev server (nothing to upload).
                let credentials = directory.appendingPathComponent("credentials")
                try FileManager.default.createDirectory(at: credentials, withIntermediateDirectories: true)
                try "token\n".write(
                    to: credentials.appendingPathComponent("api-token"), atomically: true, encoding: .utf8)
                try FileManager.default.setAttributes(
                    [.posixPermissions: 0o600], ofItemAtPath: credentials.appendingPathComponent("api-token").path)
                let words = execStart.replacingOccurrences(of: "%d", with: credentials.path).split(separator: " ").map(
                    String.init)
                #expect(words.first == "/usr/local/bin/dopesync")
                let arguments = words.dropFirst().map {
                    $0 == "/etc/dopesync/production.yaml" ? packageRoot() + "/jobs/production.yaml" : $0
                }
                // The package's tmpfiles make the spool; dopesync never makes one it was not asked to.
                try await Spool(root: directory.appendingPathComponent("spool").path).create()
                let result = try await runBuilt(
                    "dopesync", arguments,
                    environment: [
                        "DOPESYNC_SPOOL": directory.appendingPathComponent("spool").path,
                        "DOPESYNC_API_URL": server.baseURL,
                    ])
                #expect(result.status == 0, "\(arguments): \(result.stderr)")
                #expect(result.stdout.contains("run finished: 0 claimed"))
            }
        }
    }

    @Test("cron.example's lines are valid /etc/cron.d entries whose commands the binary accepts")
    func cronExample() async throws {
        let lines = try String(contentsOfFile: packageRoot() + "/jobs/cron.example", encoding: .utf8)
            .split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") && !$0.contains("=") }
        #expect(lines.count == 2, "\(lines)")
        let ranges = [0...59, 0...23, 1...31, 1...12, 0...7]
        var commands: [String] = []
        for line in lines {
            let fields = line.split(separator: " ", maxSplits: 6, omittingEmptySubsequences: true).map(String.init)
            try #require(fields.count == 7, "\(line)")
            for (field, range) in zip(fields.prefix(5), ranges) {
                // `*`, `*/5`, a number, or a comma list of numbers, each within its field's range.
                let valid = field.split(separator: ",").allSatisfy { part in
                    let base = part.split(separator: "/").first.map(String.init) ?? ""
                    return base == "*" || Int(base).map(range.contains) == true
                }
                #expect(valid, "field \(field) of: \(line)")
            }
            #expect(fields[5] == "dopesync", "runs as the unprivileged user")
            commands.append(fields[6])
        }
        #expect(
            commands[0].contains(
                "dopesync run --job /etc/dopesync/production.yaml --token-file /etc/dopesync/api-token"))
        #expect(commands[1].contains("dopesync prune --job /etc/dopesync/production.yaml --older-than 30d"))

        try await withTemporaryDirectory { directory in
            // The API the unit's token file holds a token for: an idle run checks it.
            var api = DevServerConfiguration()
            api.token = "token"
            try await withDevServer(api) { server in
                // As cron runs them: no token in the environment, the token file where the line says.
                let token = directory.appendingPathComponent("api-token").path
                try "token\n".write(toFile: token, atomically: true, encoding: .utf8)
                try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: token)
                var environment = childEnvironment.filter { !$0.key.hasPrefix("DOPESYNC_") }
                environment["DOPESYNC_SPOOL"] = directory.appendingPathComponent("spool").path
                environment["DOPESYNC_API_URL"] = server.baseURL
                // As the cron example's notes do: dopesync never makes a spool it was not asked to.
                try await Spool(root: directory.appendingPathComponent("spool").path).create()
                for command in commands {
                    // The words from the subcommand on, up to the redirection into logger
                    // (`cd /var/spool/dopesync && dopesync run ... 2>&1 | logger -t dopesync`).
                    let invocation = try #require(
                        command.components(separatedBy: " 2>&1").first?.components(separatedBy: "dopesync ").last)
                    let arguments = invocation.split(separator: " ").map(String.init)
                        .map {
                            $0 == "/etc/dopesync/production.yaml"
                                ? packageRoot() + "/jobs/production.yaml" : $0 == "/etc/dopesync/api-token" ? token : $0
                        }
                    #expect(["run", "prune"].contains(arguments.first), "\(arguments)")
                    // Off the cooperative pool: this process's dev server must go on answering meanwhile.
                    let result = try await runBuilt("dopesync", arguments, environment: environment)
                    #expect(result.status == 0, "\(arguments): \(result.stderr)")
                }
            }
        }
    }

    @Test("the path unit starts a run when a bundle is renamed into incoming/, with a limit; the prune timer is daily")
    func pathUnitAndPruneTimer() throws {
        let path = try Self.parseUnit(Self.unitFolder + "/dopesync.path")
        #expect(path["Path"]?["PathChanged"] == ["/var/spool/dopesync/incoming"])
        #expect(path["Path"]?["Unit"] == ["dopesync.service"])
        #expect(path["Path"]?["TriggerLimitBurst"] != nil && path["Path"]?["TriggerLimitIntervalSec"] != nil)
        let prune = try Self.parseUnit(Self.unitFolder + "/dopesync-prune.timer")
        #expect(prune["Timer"]?["OnCalendar"] != nil && prune["Timer"]?["Persistent"] == ["true"])
        let pruneService = try Self.parseUnit(Self.unitFolder + "/dopesync-prune.service")
        let execStart = try #require(pruneService["Service"]?["ExecStart"]?.first)
        #expect(execStart.contains("dopesync prune --job"), "\(execStart)")
        #expect(pruneService["Service"]?["User"] == ["dopesync"])
        // With `database:` a prune forgets the pruned bundles in PostgreSQL: it needs the network.
        let service = try #require(pruneService["Service"])
        #expect(service["PrivateNetwork"] == nil, "\(service)")
        let families = service["RestrictAddressFamilies"]?.joined(separator: " ").split(separator: " ") ?? []
        #expect(Set(families) == ["AF_INET", "AF_INET6", "AF_UNIX"], "\(families)")
    }
}
