import Foundation

/// Runs a command's `body` with the shared database's ledger; a database that cannot be used is
/// the command's outcome (exit 75 when unreachable, 78 when it refuses us, else 73).
/// With `spool`, a database that is not the one the spool is bound to is refused first (exit 78).
func withSharedLedger(
    _ database: DatabaseSettings, spool: Spool? = nil, _ body: (PostgresCheckpoints) async -> CommandOutcome
) async -> CommandOutcome {
    do {
        return try await PostgresCheckpoints.with(database, logger: SpoolStatus.commandLogger) { ledger in
            if let spool, let refused = await storeRefusal(spool, store: try await ledger.storeIdentity()) {
                return refused
            }
            return await body(ledger)
        }
    } catch {
        let status = (error as? CheckpointError)?.exitStatusWhenUnusable ?? .temporaryFailure
        return CommandOutcome(
            output: "", diagnostics: "cannot use the checkpoint database \(database.url): \(error)", status: status)
    }
}

/// A command's refusal of `store` when the spool is bound to another (``SpoolBinding``); nil
/// when it may go on. A command binds nothing: only a run or `migrate` does.
func storeRefusal(_ spool: Spool, store: StoreIdentity) async -> CommandOutcome? {
    do {
        try await SpoolBinding.check(spool, store: store, bindIfUnbound: false)
        return nil
    } catch {
        return CommandOutcome(output: "", diagnostics: "\(error)", status: error.exitStatus)
    }
}

/// Runs `body`, a command that writes the spool's SQLite checkpoints (`requeue`, `prune`), under
/// the shared ``StoreLock`` runs hold: a `migrate` copying the file meanwhile would leave its
/// writes behind in a file the spool no longer uses (a requeued bundle's fresh attempt count, say).
/// Refused with 75 while a migration holds it, and by ``sqliteRefusal(_:)`` once it has moved the
/// file. Only the worker (the owner of `processing/`) makes the lock file; anyone else, root
/// included, takes it only where it exists: a lock file made by root or another operator (a `sudo
/// dopesync requeue` on a spool no run has used since upgrading) is theirs, and the worker's
/// `migrate`, which opens it for writing, could not.
func withSQLiteCheckpoints(
    _ spool: Spool, command: String, _ body: () async -> CommandOutcome
) async -> CommandOutcome {
    var lock: StoreLock?
    if spool.isRunByItsWorker || FileManager.default.fileExists(atPath: StoreLock.path(spool)) {
        do {
            lock = try await StoreLock.take(.shared, in: spool)
        } catch {
            return CommandOutcome(output: "", diagnostics: "\(error)", status: .cannotCreate)
        }
        guard lock != nil else {
            return CommandOutcome(
                output: "",
                diagnostics:
                    "`dopesync migrate` is copying \(spool.databasePath) into PostgreSQL: nothing done (exit 75); once it has finished, run `dopesync \(command)` again with the database (--database or DOPESYNC_DATABASE_URL)",
                status: .temporaryFailure)
        }
    }
    let outcome: CommandOutcome
    if let refused = await sqliteRefusal(spool) { outcome = refused } else { outcome = await body() }
    await lock?.release()
    return outcome
}

/// A command's refusal of the spool's SQLite file: the spool is bound to a database, or the file
/// was moved to one by `migrate`.
func sqliteRefusal(_ spool: Spool) async -> CommandOutcome? {
    let bound: StoreIdentity?
    do {
        bound = try await SpoolBinding.read(spool)
    } catch {
        return CommandOutcome(output: "", diagnostics: "\(error)", status: error.exitStatus)
    }
    return sqliteRefusal(spool, bound: bound)
}

/// ``sqliteRefusal(_:)`` with the spool's binding as the caller read it (`check` reports it too):
/// the file is read once, so both say the same of it.
func sqliteRefusal(_ spool: Spool, bound: StoreIdentity?) -> CommandOutcome? {
    let file = StoreIdentity.sqlite(spool)
    let refusal: SpoolBindingError
    if let bound {
        // A spool bound to its SQLite file has never been migrated away.
        guard !bound.isSame(as: file) else { return nil }
        refusal = SpoolBinding.mismatch(spool, bound: bound, given: file)
    } else {
        // Only an unbound spool's file is opened (a private copy), to see whether `migrate` retired it.
        guard FileManager.default.fileExists(atPath: spool.databasePath),
            let snapshot = try? CheckpointStore(readingSnapshotOf: spool.databasePath),
            let movedTo = try? snapshot.movedTo()
        else { return nil }
        refusal = SpoolBinding.mismatch(
            spool, bound: StoreIdentity(kind: .postgresql, id: nil, name: movedTo), given: file)
    }
    return CommandOutcome(output: "", diagnostics: "\(refusal)", status: refusal.exitStatus)
}
