import Foundation

extension RunConfiguration {
    /// Which credential the run uses: `--token-file` or `--token-command` on the command line,
    /// else `DOPESYNC_API_TOKEN`, else a token command or a token file from the environment or
    /// the job file (not both).
    mutating func resolveCredential(
        _ settings: inout SettingResolver, environment: [String: String], jobFile: String?
    ) throws(ConfigurationError) {
        let tokenFile = try settings.lookup(.tokenFile)
        let tokenCommand = try settings.lookup(.tokenCommand)
        if tokenFile?.source == .commandLine && tokenCommand?.source == .commandLine {
            throw ConfigurationError(
                .badValue, key: RunSetting.tokenCommand.key, source: .commandLine,
                message: "give --token-file or --token-command, not both")
        }
        if Self.hasEnvironmentToken(environment), let command = tokenCommand, command.source != .commandLine,
            tokenFile?.source != .commandLine
        {
            warnings.append(
                "\(RunSetting.tokenEnvironmentVariable) is used, not token-command (\(command.source)): a token from "
                    + "the environment cannot be renewed when the API refuses it")
        }
        guard let command = tokenCommand, tokenFile?.source != .commandLine,
            command.source == .commandLine || !Self.hasEnvironmentToken(environment)
        else {
            return try resolveToken(tokenFile: tokenFile, environment: environment, jobFile: jobFile)
        }
        if let tokenFile, command.source != .commandLine {
            throw ConfigurationError(
                .badValue, key: RunSetting.tokenCommand.key, source: command.source,
                message: "give token-file or token-command, not both (token-file comes from \(tokenFile.source))")
        }
        try resolveTokenCommand(command.text, source: command.source)
    }

    /// The token: `--token-file` on the command line, else `DOPESYNC_API_TOKEN`, else a
    /// `token-file` from the environment or the job file.
    static func hasEnvironmentToken(_ environment: [String: String]) -> Bool {
        !(environment[RunSetting.tokenEnvironmentVariable]?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "")
            .isEmpty
    }

    /// Runs the token command once, for the token a run starts with; it runs again after a refusal.
    private mutating func resolveTokenCommand(_ command: String, source: SettingSource) throws(ConfigurationError) {
        do {
            token = try Credential.runTokenCommand(command)
        } catch {
            throw ConfigurationError(
                .tokenCommandFailed, key: RunSetting.tokenCommand.key, source: source, message: error.message)
        }
        tokenSource = .command(command)
        sources["token"] = source
    }

    private mutating func resolveToken(
        tokenFile: (text: String, source: SettingSource)?, environment: [String: String], jobFile: String?
    ) throws(ConfigurationError) {
        let fromEnvironment = environment[RunSetting.tokenEnvironmentVariable].map {
            $0.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        if let fromEnvironment, !fromEnvironment.isEmpty, tokenFile?.source != .commandLine {
            guard Credential.isUsableToken(fromEnvironment) else {
                throw ConfigurationError(
                    .badValue, key: nil, source: .environment(variable: RunSetting.tokenEnvironmentVariable),
                    message: Credential.unusableToken(RunSetting.tokenEnvironmentVariable))
            }
            if let tokenFile {
                warnings.append(
                    "\(RunSetting.tokenEnvironmentVariable) is used, not token-file (\(tokenFile.source)): a token from "
                        + "the environment cannot be read again when the API refuses it")
            }
            token = fromEnvironment
            tokenSource = .fixed
            sources["token"] = .environment(variable: RunSetting.tokenEnvironmentVariable)
            return
        }
        guard let (path, source) = tokenFile else {
            throw ConfigurationError(
                .missing, key: RunSetting.tokenFile.key,
                source: jobFile.map { .jobFile(path: $0, line: nil) } ?? .builtInDefault,
                message:
                    "the API token is not set: give --token-file, \(RunSetting.tokenEnvironmentVariable) or `token-file:` in a job file"
            )
        }
        let text = try Self.readTokenFile(path, source: source)
        token = text
        tokenSource = .file(path)
        sources["token"] = source
        // Only a warning: a file just read whose mode cannot be read is not worth refusing the run for.
        if let mode = (try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? Int,
            mode & 0o077 != 0
        {
            warnings.append(
                "the token file \(path) can be read by other users (mode \(String(mode, radix: 8))); chmod 600 it")
        }
    }

    /// The token a token file holds, alone on its one line.
    private static func readTokenFile(_ path: String, source: SettingSource) throws(ConfigurationError) -> String {
        let contents: [UInt8]
        do {
            contents = try FileSystem.readFile(path, maxBytes: 64 * 1024)
        } catch {
            // A path with no "/" that cannot be read may be the token itself, given by mistake:
            // never echo that into a log.
            let shown =
                path.contains("/")
                ? "\(error)"
                : "the file named by token-file (not shown: with no \"/\" it may be a token given by mistake)"
            throw ConfigurationError(
                .unreadableTokenFile, key: RunSetting.tokenFile.key, source: source,
                message: "cannot read the token file: \(shown)")
        }
        let text = String(decoding: contents, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty, !text.contains(where: \.isNewline) else {
            throw ConfigurationError(
                .unreadableTokenFile, key: RunSetting.tokenFile.key, source: source,
                message: "the token file \(path) must hold the token alone on one line")
        }
        guard Credential.isUsableToken(text) else {
            throw ConfigurationError(
                .unreadableTokenFile, key: RunSetting.tokenFile.key, source: source,
                message: Credential.unusableToken("the token file \(path)"))
        }
        return text
    }
}
