import Foundation

extension RunSetting {
    /// The contract names this variable `DOPESYNC_DATABASE_URL`.
    public static let database = RunSetting(
        "database", environment: "DOPESYNC_DATABASE_URL",
        help: "share the spool between hosts: the PostgreSQL database holding claims and checkpoints, "
            + "postgresql://USER@HOST:PORT/DATABASE (default: none, SQLite in the spool)")
    public static let databasePasswordFile = RunSetting(
        "database-password-file",
        help: "a file whose only content is the database's password (or DOPESYNC_DATABASE_PASSWORD)")
    public static let lease = RunSetting(
        "lease", help: "with database: how long a claim lasts unless renewed, 1s or more (default 30s)")

    /// The password itself comes only from the environment or from its file, never a job file.
    public static let databasePasswordEnvironmentVariable = "DOPESYNC_DATABASE_PASSWORD"
}

extension RunConfiguration {
    /// `database`, its password and `lease`: for every command, since `status`, `requeue`,
    /// `prune` and `inspect` read the shared store when there is one.
    mutating func resolveDatabase(_ settings: inout SettingResolver, environment: [String: String])
        throws(ConfigurationError)
    {
        // Not through `parsed`, which echoes a bad value: a URL typed with a password in it
        // must not be printed back.
        guard let (text, source) = try settings.lookup(.database), !text.isEmpty else {
            if let (_, source) = try settings.lookup(.lease) {
                warnings.append("lease (\(source)) is set but database is not: it applies only to a shared database")
            }
            return
        }
        var database: DatabaseSettings
        switch DatabaseSettings.parse(text) {
        case .success(let parsed): database = parsed
        case .failure(let problem):
            throw ConfigurationError(
                .badValue, key: RunSetting.database.key, source: source, message: problem.description)
        }
        if let lease = try settings.parsed(
            .lease, expected: "a duration of 1s or more (\(DurationText.examples))",
            { DurationText.parse($0).flatMap { $0 >= .seconds(1) ? $0 : nil } })
        {
            database.lease = lease
        }
        database.password = try Self.databasePassword(&settings, environment: environment)
        self.database = database
    }

    /// `DOPESYNC_DATABASE_PASSWORD`, else the file `database-password-file` names (trailing
    /// newline dropped), else none (a server that trusts the host, or a client certificate).
    private static func databasePassword(_ settings: inout SettingResolver, environment: [String: String])
        throws(ConfigurationError) -> String?
    {
        if let password = environment[RunSetting.databasePasswordEnvironmentVariable], !password.isEmpty {
            return password
        }
        guard let (path, source) = try settings.lookup(.databasePasswordFile) else { return nil }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8)
        else {
            throw ConfigurationError(
                .unreadableTokenFile, key: RunSetting.databasePasswordFile.key, source: source,
                message: "cannot read the database password file \(path)")
        }
        let password = text.trimmingCharacters(in: .newlines)
        guard !password.isEmpty, !password.contains("\n") else {
            throw ConfigurationError(
                .badValue, key: RunSetting.databasePasswordFile.key, source: source,
                message: "the database password file \(path) must hold the password alone, on one line")
        }
        return password
    }
}
