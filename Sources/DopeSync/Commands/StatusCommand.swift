import Foundation

/// `dopesync status [--spool DIR] [--json]`: what is in the spool and why, without SQL.
///
/// Cost: one `readdir` + `fstatat` pass per folder, two queries on the checkpoint database (deferred and
/// failed bundles), one for claims and one for the last run, and one small read per `failed/*.error`.
/// No archive is opened and nothing is written (a missing database is not created).
public enum StatusCommand {
    public static func run(
        spoolRoot: String, json: Bool, minAge: Duration = .seconds(5), minFreeSpace: FreeSpaceFloor = .default,
        runs: Int = 0, now: Date = Date(), database: DatabaseSettings? = nil, apiURL: String? = nil
    ) async -> CommandOutcome {
        do {
            // Absolute, so the database's path can be copied into `sqlite3` from anywhere.
            let root = URL(fileURLWithPath: spoolRoot).standardizedFileURL.path
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: root, isDirectory: &isFolder), isFolder.boolValue else {
                return CommandOutcome(
                    output: "",
                    diagnostics:
                        "no spool at \(root): check --spool, or the job file's spool: (--job FILE; without either, ./spool)",
                    status: .cannotCreate)
            }
            if database == nil, let refused = await sqliteRefusal(Spool(root: root)) { return refused }
            var report = try await SpoolStatus.gather(
                spool: Spool(root: root), minAge: minAge, runs: runs, now: now, database: database, apiURL: apiURL)
            report.space = await FileSystemSpace.of(root).map { SpoolStatus.Space($0, floor: minFreeSpace) }
            return CommandOutcome(output: json ? report.json() : report.text(), status: .success)
        } catch let error as SpoolBindingError {
            return CommandOutcome(output: "", diagnostics: "\(error)", status: error.exitStatus)
        } catch let error as SpoolError {
            return CommandOutcome(output: "", diagnostics: "cannot read the spool: \(error)", status: .cannotCreate)
        } catch let error as CheckpointError where error.isUnreachable || error.code == .refused {
            // The shared database: as for requeue and prune, 75 unreachable, 78 refusing us.
            return CommandOutcome(
                output: "", diagnostics: "cannot read the checkpoint database: \(error)",
                status: error.exitStatusWhenUnusable)
        } catch {
            return CommandOutcome(
                output: "", diagnostics: "cannot read the checkpoint database: \(error)", status: .cannotCreate)
        }
    }
}
