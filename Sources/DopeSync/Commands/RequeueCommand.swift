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

    public static func run(spoolRoot: String, selection: Selection, now: Date = Date()) -> CommandOutcome {
        let spool = Spool(root: spoolRoot)
        let failedBundles: [SpoolEntry]
        do {
            failedBundles = try spool.list(.failed)
        } catch {
            return CommandOutcome(output: "", diagnostics: "cannot read the spool: \(error)", status: .cannotCreate)
        }
        let known = Set(failedBundles.map(\.name))

        var names: [String] = []
        var unknown: [String] = []
        switch selection {
        case .all:
            names = failedBundles.sorted { ($0.modified, $0.name) < ($1.modified, $1.name) }.map(\.name)
        case .names(let given):
            for argument in given {
                let name = argument.hasPrefix("failed/") ? String(argument.dropFirst("failed/".count)) : argument
                if known.contains(name) && !name.contains("/") {
                    if !names.contains(name) { names.append(name) }
                } else {
                    unknown.append(argument)
                }
            }
        }

        var store: CheckpointStore?
        var diagnostics: [String] = []
        if !names.isEmpty && FileManager.default.fileExists(atPath: spool.databasePath) {
            do {
                store = try CheckpointStore(spool: spool, now: now)
            } catch {
                return CommandOutcome(
                    output: "", diagnostics: "cannot open the checkpoint database: \(error)", status: .cannotCreate)
            }
        }

        var lines: [String] = []
        var status = ExitStatus.success
        for name in names {
            do {
                // Reset first, under the name the row has now: once moved, a run may claim it at any moment.
                let steps = try store?.bundleState(name: name)?.stepsDone
                try store?.resetAttempts(name: name, now: now)
                let final = try spool.requeueFailed(name, now: now)
                if final != name { try store?.renamed(from: name, to: final, now: now) }
                unlink(spool.sidecarPath(forFailed: name))
                var line = "requeued failed/\(name) -> incoming/\(final)"
                if let steps, steps > 0 { line += " (resumes: \(steps) step\(steps == 1 ? "" : "s") already done)" }
                lines.append(line)
            } catch {
                diagnostics.append("cannot requeue failed/\(name): \(error)")
                status = .cannotCreate
            }
        }
        // A name waiting for retry in incoming/ is made due now: the worker cannot `touch` a
        // producer's file, and its next attempt is in the store anyway.
        unknown = unknown.filter { argument in
            let name = argument.hasPrefix("incoming/") ? String(argument.dropFirst("incoming/".count)) : argument
            guard !name.contains("/"), FileManager.default.fileExists(atPath: spool.path(.incoming, name)),
                FileManager.default.fileExists(atPath: spool.databasePath)
            else { return true }
            do {
                guard try CheckpointStore(spool: spool, now: now).makeDue(name: name, now: now) else { return true }
                lines.append("incoming/\(name) is due now (it was waiting for retry; its attempts are kept)")
                return false
            } catch {
                diagnostics.append("cannot make incoming/\(name) due: \(error)")
                status = .cannotCreate
                return false
            }
        }
        if !unknown.isEmpty {
            diagnostics.append(
                "not a bundle in \(spool.path(.failed)) or waiting for retry in incoming/: \(unknown.joined(separator: ", "))"
            )
            if status == .success { status = .bundlesFailed }
        }
        if names.isEmpty && unknown.isEmpty && lines.isEmpty { lines.append("nothing to requeue: failed/ is empty") }
        // Names are producers' choice: nothing in them may start a line or drive a terminal.
        return CommandOutcome(
            output: lines.map(DisplayText.escaped).joined(separator: "\n"),
            diagnostics: diagnostics.isEmpty ? nil : diagnostics.map(DisplayText.escaped).joined(separator: "\n"),
            status: status)
    }
}
