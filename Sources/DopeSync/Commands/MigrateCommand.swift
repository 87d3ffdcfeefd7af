import Foundation

/// `dopesync migrate --to URL [--spool DIR]`: copies the spool's SQLite checkpoints (steps with
/// their server ids, bundles with their attempts, runs, reference lists) into the PostgreSQL
/// database several hosts will share, so that a spool switched over resends nothing.
///
/// Run it with no `dopesync run` on the spool (a claim in progress is refused), then give every
/// host `database:`. The file is left as it was; running it twice copies nothing twice.
/// Exit 0; 73 when the file cannot be read or a run holds a claim; 75 when the database cannot
/// be reached; 78 when it refuses the user or password.
public enum MigrateCommand {
    public static func run(spoolRoot: String, to database: DatabaseSettings) async -> CommandOutcome {
        let spool = Spool(root: spoolRoot)
        guard FileManager.default.fileExists(atPath: spool.databasePath) else {
            return CommandOutcome(
                output: "nothing to migrate: \(spool.databasePath) does not exist", status: .success)
        }
        let exported: Exported
        do {
            exported = try Exported(spool: spool)
        } catch {
            return CommandOutcome(
                output: "", diagnostics: "cannot read \(spool.databasePath): \(error)", status: .cannotCreate)
        }
        if let held = exported.claimsHeld.first {
            return CommandOutcome(
                output: "",
                diagnostics:
                    "a run holds processing/\(held) (and \(exported.claimsHeld.count - 1) more): stop the runs on this spool, then migrate",
                status: .cannotCreate)
        }
        return await withSharedLedger(database) { store in
            do throws(CheckpointError) {
                let counts = try await store.importCheckpoints(
                    steps: exported.steps, bundles: exported.bundles, runs: exported.runs,
                    referenceLists: exported.referenceLists)
                return CommandOutcome(
                    output:
                        "migrated \(spool.databasePath) to \(database.url): \(counts.steps) steps, \(counts.bundles) bundles, "
                        + "\(counts.runs) runs, \(counts.referenceLists) reference lists; \(counts.alreadyThere) rows were there already "
                        + "and were kept. Give every host `database: \(database.url)` now.",
                    status: .success)
            } catch {
                let status: ExitStatus = error.isUnreachable ? .temporaryFailure : .cannotCreate
                return CommandOutcome(output: "", diagnostics: "nothing was migrated: \(error)", status: status)
            }
        }
    }

    /// What the file holds, read in one go.
    private struct Exported {
        var steps: [StepRecord]
        var bundles: [BundleState]
        var runs: [RunRecord]
        var referenceLists: [ReferenceList: CachedReferenceList]
        /// Bundles in `processing/` whose flock a live run holds.
        var claimsHeld: [String]

        init(spool: Spool) throws {
            let store = try CheckpointStore(spool: spool)
            steps = try store.allSteps()
            bundles = try store.bundles(withOutcome: nil)
            runs = try store.recentRuns(limit: Int.max)
            referenceLists = try store.referenceLists()
            claimsHeld = try spool.processingEntries().filter { spool.isClaimHeld($0) == true }.map(\.name)
        }
    }
}
