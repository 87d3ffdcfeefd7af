extension InspectCommand {
    /// `dopesync inspect`: with `database`, the progress is read from the database the spool's
    /// hosts share, opened only for a valid bundle (a database that cannot be used is no
    /// progress, as a spool's file that cannot be read); else from the spool's file.
    public static func run(
        bundlePath: String, json: Bool, databasePath: String?, database: DatabaseSettings?,
        limits: BundleLimits = .default
    ) async -> CommandOutcome {
        let ledger: LedgerScope? = database.map { database in
            { body in
                _ = await withSharedLedger(database) { ledger in
                    await body(ledger)
                    return CommandOutcome(output: "", status: .success)
                }
            }
        }
        return await run(bundlePath: bundlePath, json: json, databasePath: databasePath, ledger: ledger, limits: limits)
    }
}
