import Foundation

extension SpoolStatus {
    /// How many bundles of each list the text shows (the JSON has them all).
    public static let textListLimit = 20

    /// The report for a person.
    public func text() -> String {
        let lines = headerLines + folderLines + listLines + [""] + lastRunLines + hostRunLines + recentRunLines
        // Names and messages come from producers and servers: nothing in them may start a line or
        // drive the terminal.
        return lines.map(DisplayText.escaped).joined(separator: "\n")
    }

    private var headerLines: [String] {
        var lines = [
            "spool        \(spool)",
            "checkpoints  \(database)\(databaseExists ? "" : " (not created yet)")"
                + (databaseUnreadable != nil
                    ? " (cannot be read by this user: retry times and claims unknown; run status as the worker's user)"
                    : databaseReadAsSnapshot ? " (read as it is on disk: not this user's, or read-only)" : ""),
            "",
        ]
        if let space {
            var line =
                "free space   \(ByteCount(space.freeBytes)) of \(ByteCount(space.totalBytes)), floor \(ByteCount(space.floorBytes))"
            if space.freeBytes < space.floorBytes {
                line += ": BELOW THE FLOOR, runs claim nothing (exit 73); `dopesync prune` frees done/"
            } else if space.low {
                line += ": LOW, under twice the floor; runs stop claiming below it"
            }
            lines += [line, ""]
        }
        return lines
    }

    private var folderLines: [String] {
        var lines = ["folder          count        size  oldest"]
        for name in ["tmp", "incoming", "processing", "done", "failed"] {
            guard let folder = folders[name] else { continue }
            var line =
                name.padding(toLength: 12, withPad: " ", startingAt: 0)
                + Self.leftPadded(String(folder.count), 9) + Self.leftPadded(ByteCount(folder.bytes).description, 12)
                + "  " + (folder.oldestAgeSeconds.map(Self.age) ?? "-")
            if name == "incoming" && folder.count > 0 {
                line += "  (\(incoming.dueNow) due now, \(incoming.waitingForRetry) waiting for retry"
                if incoming.heldByMinAge > 0 {
                    line += ", \(incoming.heldByMinAge) modified within min-age \(Self.age(incoming.minAgeSeconds))"
                }
                line += ")"
            }
            lines.append(line)
        }
        return lines
    }

    private var listLines: [String] {
        var lines = Self.section(
            "mtime in the future (\(incoming.mtimeInFuture.count)): its producer's clock is ahead; judged by its arrival",
            incoming.mtimeInFuture
        ) { bundle in
            "\(bundle.name)  mtime \(Self.age(bundle.secondsAhead)) in the future"
        }
        lines += Self.section(
            "deferred in the future (\(incoming.deferredInFuture.count)): this clock went back since; due now",
            incoming.deferredInFuture
        ) { bundle in
            "\(bundle.name)  deferred \(Self.age(bundle.secondsAhead)) in the future"
        }
        lines += Self.section("waiting for retry (\(waiting.count)):", waiting) { bundle in
            var line =
                "\(bundle.name)  next attempt \(Self.time(bundle.nextAttemptAt)) (in \(Self.age(bundle.nextAttemptAt.timeIntervalSince(generatedAt))))"
            if let attempts = bundle.attempts { line += ", \(attempts) attempt\(attempts == 1 ? "" : "s")" }
            if let error = bundle.lastError { line += ", last error: \(Self.describe(error))" }
            if let api = bundle.checkpointsAPI { line += "; its checkpoints are \(api)'s, not the configured API's" }
            return line
        }
        lines += Self.section(
            "failed (\(failed.count)), see failed/NAME.error; `dopesync requeue NAME` once fixed:", failed
        ) { bundle in
            var line = "\(bundle.name)  "
            if let reason = bundle.reason {
                line += Self.describe(
                    LastError(reason: reason, step: bundle.step, httpStatus: bundle.httpStatus, message: bundle.message)
                )
                // The message of an API's 422 need not name it: the sidecar's field does.
                if let field = bundle.field, !line.contains(field) { line += " (field \(field))" }
            } else {
                line += "no reason known (no sidecar, no checkpoint row)"
            }
            if let failedAt = bundle.failedAt { line += ", failed \(Self.time(failedAt))" }
            if let api = bundle.checkpointsAPI { line += "; its checkpoints are \(api)'s, not the configured API's" }
            return line
        }
        lines += Self.section(
            "incomplete on the server (\(halfSessions.count)): the session is there with only some records until "
                + "the bundle is done (the API never deletes):", halfSessions
        ) { half in
            let left = half.recordsLeft.map { "\($0) left" } ?? "how many left unknown"
            return "\(half.name)  session \(half.session): \(half.recordsOnServer) records on the server, \(left), "
                + "since \(Self.time(half.since)) (\(Self.age(half.ageSeconds))), bundle in \(half.folder)/"
        }
        lines += Self.section("claims in progress (\(claims.count)):", claims) { claim in
            var line = "\(claim.name)  "
            if let host = claim.host, let pid = claim.pid, let runID = claim.runID {
                line += "by \(host) pid \(pid) run \(runID), "
            } else {
                line += "owner unknown, "
            }
            line += "\(Self.age(claim.ageSeconds)) ago, "
            if let unreadable = claim.unreadable {
                line += "cannot be opened (\(unreadable)): runs leave it, and exit 73, until the worker may read it"
            } else if let notLockable = claim.notLockable {
                line +=
                    "owner dead, but cannot be locked (\(notLockable)): on NFS a lock needs the file open for "
                    + "writing; runs leave it, and exit 73, until the worker may write it (chown it to the "
                    + "worker, or give it the worker's group and chmod g+w)"
            } else if let remaining = claim.leaseRemainingSeconds {
                line +=
                    remaining > 0
                    ? "lease \(Self.age(remaining)) left"
                    : "lease ran out \(Self.age(-remaining)) ago: its worker stopped renewing it; the next run takes it over"
            } else {
                line += claim.ownerAlive ? "owner alive" : "owner dead: an orphan, the next run takes it back"
            }
            return line
        }
        return lines
    }

    private var lastRunLines: [String] {
        guard let run = lastRun else { return ["last run     none recorded"] }
        let summary = run.summary
        let lookups =
            switch run.apiLookups {
            case true?:
                "exactly once the API answers lookups: nothing is sent twice, even if it ignores Idempotency-Key"
            case false?: "exactly once the API has no lookups: nothing is sent twice only if it honours Idempotency-Key"
            case nil: "exactly once not known: no bundle needed a lookup in the last run"
            }
        return [
            "last run     \(run.runID) on \(run.host), finished \(Self.time(run.finishedAt)) (\(Self.age(generatedAt.timeIntervalSince(run.finishedAt))) ago), exit \(summary.exitCode)",
            "             claimed \(summary.claimed), done \(summary.done), deferred \(summary.deferred), failed \(summary.failed); \(summary.requests) requests, \(ByteCount(summary.bytes)), \(String(format: "%.1f", summary.seconds)) s",
            lookups,
        ]
    }

    /// With a shared database: each host's last run, one line each.
    private var hostRunLines: [String] {
        guard let runs = lastRunOfEachHost, runs.count > 1 else { return [] }
        return ["", "last run of each host (\(runs.count)):"]
            + runs.map { run in
                let summary = run.summary
                return
                    "  \(run.host)  \(Self.time(run.finishedAt)) exit \(summary.exitCode): claimed \(summary.claimed), "
                    + "done \(summary.done), deferred \(summary.deferred), failed \(summary.failed); "
                    + "\(summary.requests) requests, \(String(format: "%.1f", summary.seconds)) s"
            }
    }

    private var recentRunLines: [String] {
        guard let recentRuns else { return [] }
        return ["", "runs, newest first (\(recentRuns.count)):"]
            + recentRuns.map { run in
                var line = "  \(Self.time(run.startedAt)) \(run.host) pid \(run.pid)  "
                if let summary = run.summary {
                    line +=
                        "exit \(summary.exitCode): claimed \(summary.claimed), done \(summary.done), deferred \(summary.deferred), "
                        + "failed \(summary.failed); \(summary.requests) requests, \(String(format: "%.1f", summary.seconds)) s"
                } else {
                    line += "not finished (still going, or the process died)"
                }
                return line
            }
    }

    /// A blank line, the title, and one indented line per item up to ``textListLimit``; nothing when empty.
    static func section<Item>(_ title: String, _ items: [Item], _ line: (Item) -> String) -> [String] {
        guard !items.isEmpty else { return [] }
        var lines = ["", title] + items.prefix(textListLimit).map { "  " + line($0) }
        if items.count > textListLimit {
            lines.append("  … and \(items.count - textListLimit) more (--json lists them all)")
        }
        return lines
    }

    static func describe(_ error: LastError) -> String {
        var text = error.reason
        if let step = error.step { text += " at \(step)" }
        if let status = error.httpStatus { text += " (HTTP \(status))" }
        if let message = error.message, !message.isEmpty { text += ": \(message)" }
        return text
    }

    static func time(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle())
    }

    /// `42s`, `5m 3s`, `2h 5m`, `3d 4h`.
    static func age(_ seconds: Double) -> String {
        let total = Int(max(0, seconds).rounded())
        let (days, hours, minutes, secs) = (total / 86_400, total % 86_400 / 3600, total % 3600 / 60, total % 60)
        if days > 0 { return "\(days)d \(hours)h" }
        if hours > 0 { return "\(hours)h \(minutes)m" }
        if minutes > 0 { return "\(minutes)m \(secs)s" }
        return "\(secs)s"
    }

    static func leftPadded(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
    }
}
