import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `dopesync requeue NAME... | --all [--spool DIR]`: failed bundles back to `incoming/`, due at once, with a
/// fresh attempt count. Their checkpoints stay, so they resume where they stopped. A NAME waiting for
/// retry in `incoming/` is made due now instead (attempts kept).
///
/// - `failed/NAME.error` is removed once the bundle has moved: the checkpoint database keeps the last error
///   (its `bundles` row, `last_error_*`, until the next failure), and a stale sidecar would make the bundle's next failure
///   take a suffixed name.
/// - A name already taken in `incoming/` gets a suffix; nothing is overwritten.
/// - Exit 0 when every name was requeued; 1 when a name is not a bundle in `failed/` (the others are still
///   requeued); 73 when the spool cannot be read or a bundle cannot be moved.
public enum RequeueCommand {
    public enum Selection: Sendable, Equatable {
        case names([String])
        case all
    }

    public static func run(
        spoolRoot: String, selection: Selection, now: Date = Date(), database: DatabaseSettings? = nil
    ) async -> CommandOutcome {
        let spool = Spool(root: spoolRoot)
        let failedBundles: [SpoolEntry]
        do {
            failedBundles = try await spool.list(.failed)
        } catch {
            return CommandOutcome(output: "", diagnostics: "cannot read the spool: \(error)", status: .cannotCreate)
        }
        if let database {
            return await withSharedLedger(database, spool: spool) { ledger in
                await requeue(selection, among: failedBundles, spool: spool, ledger: ledger, now: now)
            }
        }
        return await withSQLiteCheckpoints(spool, command: "requeue") {
            await requeueOnSQLite(selection, among: failedBundles, spool: spool, now: now)
        }
    }

    private static func requeueOnSQLite(
        _ selection: Selection, among failedBundles: [SpoolEntry], spool: Spool, now: Date
    ) async -> CommandOutcome {
        var store: CheckpointStore?
        let selected = select(selection, among: failedBundles, spool: spool)
        // Nothing named: nothing to open (a status-like call must not need the database).
        if !(selected.names.isEmpty && selected.unknown.isEmpty)
            && FileManager.default.fileExists(atPath: spool.databasePath)
        {
            do {
                store = try CheckpointStore(spool: spool, now: now)
            } catch {
                return CommandOutcome(
                    output: "", diagnostics: "cannot open the checkpoint database: \(error)", status: .cannotCreate)
            }
        }
        return await requeue(selection, among: failedBundles, spool: spool, ledger: store, now: now)
    }

    private static func requeue(
        _ selection: Selection, among failedBundles: [SpoolEntry], spool: Spool, ledger: (any CheckpointLedger)?,
        now: Date
    ) async -> CommandOutcome {
        var (names, unknown) = select(selection, among: failedBundles, spool: spool)
        var report = Report()
        for name in names { await requeueFailed(name, spool: spool, ledger: ledger, now: now, into: &report) }
        // A name waiting for retry in incoming/ is made due now: the worker cannot `touch` a
        // producer's file, and its next attempt is in the store anyway.
        var notDue: [String] = []
        for argument in unknown where !(await makeDue(argument, spool: spool, ledger: ledger, now: now, into: &report))
        {
            notDue.append(argument)
        }
        unknown = notDue
        if !unknown.isEmpty {
            report.diagnostics.append(
                "not a bundle in \(spool.path(.failed)) or waiting for retry in incoming/: \(unknown.joined(separator: ", ")) "
                    + "(give a NAME as `dopesync status` or `ls` lists it, or its path in failed/ or incoming/; "
                    + "a name status shows escaped, \\xff or \\n, is easiest with --all)")
            if report.status == .success { report.status = .bundlesFailed }
        }
        if names.isEmpty && unknown.isEmpty && report.lines.isEmpty {
            report.lines.append("nothing to requeue: failed/ is empty")
        }
        // Names are producers' choice: nothing in them may start a line or drive a terminal.
        return CommandOutcome(
            output: report.lines.map(DisplayText.escaped).joined(separator: "\n"),
            diagnostics: report.diagnostics.isEmpty
                ? nil : report.diagnostics.map(DisplayText.escaped).joined(separator: "\n"),
            status: report.status)
    }

    private struct Report {
        var lines: [String] = []
        var diagnostics: [String] = []
        var status = ExitStatus.success
    }

    /// The bundles of `failed/` the selection names (oldest first for `--all`), and the arguments
    /// that name none.
    private static func select(_ selection: Selection, among failed: [SpoolEntry], spool: Spool) -> (
        names: [String], unknown: [String]
    ) {
        switch selection {
        case .all:
            return (failed.sorted { ($0.modified, $0.name) < ($1.modified, $1.name) }.map(\.name), [])
        case .names(let given):
            let known = Set(failed.map(\.name))
            var (names, unknown) = ([String](), [String]())
            for argument in given.map({ spoolRelative($0, spool: spool, failed: known) }) {
                let name = argument.hasPrefix("failed/") ? String(argument.dropFirst("failed/".count)) : argument
                if known.contains(name) && !name.contains("/") {
                    if !names.contains(name) { names.append(name) }
                } else {
                    unknown.append(argument)
                }
            }
            return (names, unknown)
        }
    }

    /// An argument given as a path (`/var/spool/dopesync/failed/X.tgz`, as `ls` or the docs' `grep
    /// -rH` print it, relative or absolute) as `failed/X.tgz` or `incoming/X.tgz`; a failed
    /// bundle's sidecar (`failed/X.tgz.error`) as its bundle. Anything else as given.
    static func spoolRelative(_ argument: String, spool: Spool, failed: Set<String>) -> String {
        guard argument.contains("/") else { return argument }
        let path = URL(fileURLWithPath: argument).standardizedFileURL
        let folder = path.deletingLastPathComponent().path
        var name = path.lastPathComponent
        let standardized = { (folder: Spool.Folder) in URL(fileURLWithPath: spool.path(folder)).standardizedFileURL.path
        }
        if folder == standardized(.failed) {
            if !failed.contains(name), name.hasSuffix(".error"), failed.contains(String(name.dropLast(6))) {
                name = String(name.dropLast(6))
            }
            return "failed/" + name
        }
        if folder == standardized(.incoming) { return "incoming/" + name }
        return argument
    }

    private static func requeueFailed(
        _ name: String, spool: Spool, ledger: (any CheckpointLedger)?, now: Date, into report: inout Report
    ) async {
        do {
            // Reset first, under the name the row has now: once moved, a run may claim it at any moment.
            let steps = try await ledger?.bundleState(name: name)?.stepsDone ?? nil
            _ = try await ledger?.resetAttempts(name: name, now: now)
            let final = try await spool.requeueFailed(name, now: now)
            if final != name { try await ledger?.renamed(from: name, to: final, now: now) }
            unlink(spool.sidecarPath(forFailed: name))
            var line = "requeued failed/\(name) -> incoming/\(final)"
            if let steps, steps > 0 { line += " (resumes: \(steps) step\(steps == 1 ? "" : "s") already done)" }
            report.lines.append(line)
        } catch {
            report.diagnostics.append("cannot requeue failed/\(name): \(error)")
            report.status = .cannotCreate
        }
    }

    /// Makes `argument`, a bundle waiting for retry in `incoming/`, due now; false when it is none.
    private static func makeDue(
        _ argument: String, spool: Spool, ledger: (any CheckpointLedger)?, now: Date, into report: inout Report
    ) async -> Bool {
        let name = argument.hasPrefix("incoming/") ? String(argument.dropFirst("incoming/".count)) : argument
        guard !name.contains("/"), FileManager.default.fileExists(atPath: spool.path(.incoming, name)),
            let ledger
        else { return false }
        do {
            guard try await ledger.makeDue(name: name, now: now) else { return false }
            report.lines.append("incoming/\(name) is due now (it was waiting for retry; its attempts are kept)")
        } catch {
            report.diagnostics.append("cannot make incoming/\(name) due: \(error)")
            report.status = .cannotCreate
        }
        return true
    }
}
