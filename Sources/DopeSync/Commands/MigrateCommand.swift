import Foundation

/// `dopesync migrate --to URL [--spool DIR]`: copies the spool's SQLite checkpoints (steps with
/// their server ids, bundles with their attempts, runs, reference lists) into the PostgreSQL
/// database several hosts will share, so that a spool switched over resends nothing.
///
/// Run it with no `dopesync run` on the spool (a claim in progress is refused), then give every
/// host `database:`. It is the one way to move a spool to another store: it binds the spool to
/// the database (``SpoolBinding``) and marks the SQLite file as moved, so that no command uses it
/// again by mistake; running it twice copies nothing twice. Exit 0; 73 when the file cannot be
/// read, or a run uses it (``StoreLock``) or holds a claim; 75 when the database cannot be reached; 78 when it refuses the
/// user or password, or the spool is bound to another database (without `--rebind`).
public enum MigrateCommand {
    /// `rebind`: the spool is bound to another PostgreSQL database, lost for good, and this one
    /// replaces it (nothing can be copied from it; the lookups find what is on the server).
    public static func run(spoolRoot: String, to database: DatabaseSettings, rebind: Bool = false) async
        -> CommandOutcome
    {
        let spool = Spool(root: spoolRoot)
        let bound: StoreIdentity?
        do {
            bound = try await SpoolBinding.read(spool)
        } catch {
            return CommandOutcome(output: "", diagnostics: "\(error)", status: error.exitStatus)
        }
        if bound?.kind == .postgresql {
            return await withSharedLedger(database) { store in
                await rebindToDatabase(spool, bound: bound!, store: store, rebind: rebind)
            }
        }
        // Alone on the file: a run that has opened it (waiting out min-age, say, with no claim yet)
        // could write steps after they are copied, and one that starts now must not.
        let lock: StoreLock?
        do {
            lock = try await StoreLock.take(.exclusive, in: spool)
        } catch {
            return CommandOutcome(output: "", diagnostics: "\(error)", status: .cannotCreate)
        }
        guard let lock else {
            return CommandOutcome(
                output: "",
                diagnostics:
                    "a run (or a `requeue` or `prune`) is using \(spool.databasePath): stop the timers and dopesync.path (systemctl stop dopesync.timer dopesync.path), let the run end, then migrate",
                status: .cannotCreate)
        }
        let outcome = await copy(spool, to: database)
        await lock.release()
        return outcome
    }

    /// Copies the SQLite file's checkpoints into `database` and binds the spool to it; the caller
    /// holds the file's lock, alone.
    private static func copy(_ spool: Spool, to database: DatabaseSettings) async -> CommandOutcome {
        guard FileManager.default.fileExists(atPath: spool.databasePath) else {
            return await withSharedLedger(database) { store in
                await bindToDatabase(
                    spool, store: store, copied: "nothing to migrate: \(spool.databasePath) does not exist")
            }
        }
        let exported: Exported
        do {
            exported = try await SpoolCalls.run { try Exported(spool: spool) }
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
                    referenceLists: exported.referenceLists, sessions: exported.sessions,
                    apiAddresses: exported.apiBook.addresses)
                return await bindToDatabase(
                    spool, store: store,
                    copied: "migrated \(spool.databasePath) to \(database.url): \(counts.steps) steps, "
                        + "\(counts.bundles) bundles, \(counts.runs) runs, \(counts.referenceLists) reference lists; "
                        + "\(counts.alreadyThere) rows were there already and were kept")
            } catch {
                let status: ExitStatus = error.isUnreachable ? .temporaryFailure : .cannotCreate
                return CommandOutcome(output: "", diagnostics: "nothing was migrated: \(error)", status: status)
            }
        }
    }

    /// Binds the spool to the database and retires its SQLite file, which no command uses again.
    private static func bindToDatabase(_ spool: Spool, store: PostgresCheckpoints, copied: String) async
        -> CommandOutcome
    {
        do {
            let identity = try await store.storeIdentity()
            if FileManager.default.fileExists(atPath: spool.databasePath) {
                try CheckpointStore(spool: spool).markMoved(to: identity.name)
            }
            try await SpoolBinding.rebind(spool, to: identity)
            return CommandOutcome(
                output: "\(copied). The spool is bound to \(identity) now (\(SpoolBinding.path(spool))); "
                    + "\(spool.databasePath) is no longer used. Give every host `database: \(identity.name)` now.",
                status: .success)
        } catch let error as SpoolBindingError {
            return CommandOutcome(output: copied, diagnostics: "\(error)", status: error.exitStatus)
        } catch {
            return CommandOutcome(
                output: copied, diagnostics: "the spool could not be bound to the database: \(error)",
                status: .cannotCreate)
        }
    }

    /// A spool bound to a PostgreSQL database already: this one (nothing to do), or another,
    /// which only `--rebind` replaces.
    private static func rebindToDatabase(
        _ spool: Spool, bound: StoreIdentity, store: PostgresCheckpoints, rebind: Bool
    ) async -> CommandOutcome {
        let identity: StoreIdentity
        do {
            identity = try await store.storeIdentity()
        } catch {
            return CommandOutcome(output: "", diagnostics: "\(error)", status: .temporaryFailure)
        }
        if bound.isSame(as: identity) {
            return CommandOutcome(
                output: "nothing to migrate: the spool's checkpoints are in \(identity) already", status: .success)
        }
        guard rebind else {
            return CommandOutcome(
                output: "",
                diagnostics: "the spool is bound to \(bound), not to \(identity): a database cannot be copied into "
                    + "another by dopesync. Only if \(bound.name) is lost for good and \(identity.name) replaces it, run "
                    + "this again with --rebind: what the lost database recorded is then an unknown outcome, looked up "
                    + "on the server before anything is sent",
                status: .configuration)
        }
        return await bindToDatabase(spool, store: store, copied: "the spool was bound to \(bound)")
    }

    /// What the file holds, read in one go.
    private struct Exported {
        var steps: [StepRecord]
        var bundles: [BundleState]
        var runs: [RunRecord]
        var referenceLists: [ReferenceList: CachedReferenceList]
        var sessions: [String: SessionBinding]
        var apiBook: APIBook
        /// Bundles in `processing/` whose flock a live run holds.
        var claimsHeld: [String]

        init(spool: Spool) throws {
            let store = try CheckpointStore(spool: spool)
            steps = try store.allSteps()
            bundles = try store.bundles(withOutcome: nil)
            runs = try store.recentRuns(limit: Int.max)
            referenceLists = try store.referenceLists()
            sessions = try store.allSessionBindings()
            apiBook = try store.apiBook()
            claimsHeld = try spool.processingEntries().filter { spool.lookAtClaim($0) == .held(true) }.map(\.name)
        }
    }
}
