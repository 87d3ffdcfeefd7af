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
        if Self.environmentToken(environment) != nil, let command = tokenCommand, command.source != .commandLine,
            tokenFile?.source != .commandLine
        {
            warnings.append(
                "\(RunSetting.tokenEnvironmentVariable) is used, not token-command (\(command.source)): a token from "
                    + "the environment cannot be renewed when the API refuses it")
        }
        guard let command = tokenCommand, tokenFile?.source != .commandLine,
            command.source == .commandLine || Self.environmentToken(environment) == nil
        else {
            return try resolveToken(tokenFile: tokenFile, environment: environment, jobFile: jobFile)
        }
        if let tokenFile, command.source != .commandLine {
            throw ConfigurationError(
                .badValue, key: RunSetting.tokenCommand.key, source: command.source,
                message: "give token-file or token-command, not both (token-file comes from \(tokenFile.source))")
        }
        let passing = try settings.lookup(.tokenCommandEnvironment).map {
            $0.text.split(whereSeparator: { $0 == "," || $0 == " " }).map(String.init)
        }
        resolveTokenCommand(command.text, passing: passing ?? [], source: command.source)
    }

    /// `DOPESYNC_API_TOKEN`, trimmed; nil when it is not set or blank.
    static func environmentToken(_ environment: [String: String]) -> String? {
        let token = environment[RunSetting.tokenEnvironmentVariable]?.trimmingCharacters(in: .whitespacesAndNewlines)
        return token?.isEmpty == false ? token : nil
    }

    /// Records the token command, which ``runTokenCommand()`` runs, for the token a run starts
    /// with; it runs again after a refusal. Not here: resolving is synchronous (it reads files,
    /// on a thread that may block), running a child process is not.
    private mutating func resolveTokenCommand(_ command: String, passing: [String], source: SettingSource) {
        tokenSource = .command(command, passing: passing)
        sources["token"] = source
    }

    /// Runs the token command, where the credential is one, for ``token``: the token a run starts
    /// with. Nothing to do for a token from a file or the environment, which ``resolve`` read.
    public mutating func runTokenCommand() async throws(ConfigurationError) {
        guard case .command(let command, let passing) = tokenSource else { return }
        do {
            token = try await Credential.runTokenCommand(command, passing: passing)
        } catch {
            throw ConfigurationError(
                .tokenCommandFailed, key: RunSetting.tokenCommand.key, source: sources["token"] ?? .commandLine,
                message: error.message)
        }
    }

    /// The token: `--token-file` on the command line, else `DOPESYNC_API_TOKEN`, else a
    /// `token-file` from the environment or the job file.
    private mutating func resolveToken(
        tokenFile: (text: String, source: SettingSource)?, environment: [String: String], jobFile: String?
    ) throws(ConfigurationError) {
        if let fromEnvironment = Self.environmentToken(environment), tokenFile?.source != .commandLine {
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
        do {
            token = try Credential.readTokenFile(path)
        } catch {
            throw ConfigurationError(
                .unreadableTokenFile, key: RunSetting.tokenFile.key, source: source, message: error.message)
        }
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
}
