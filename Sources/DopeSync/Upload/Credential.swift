import Foundation
import Logging
import Synchronization

/// The API token a run sends, and where a fresh one comes from when the API refuses it: tokens
/// expire and are rotated by secret managers that replace the token file, or are handed out by a
/// command. Never printed, old or new.
public final class Credential: Sendable {
    /// Where the token comes from.
    public enum Source: Sendable, Equatable {
        /// Given once (`DOPESYNC_API_TOKEN`): nothing to read again.
        case fixed
        /// A file holding the token alone on one line (`token-file`), read again after a refusal.
        case file(String)
        /// A command whose first line of output is the token (`token-command`), run again after a
        /// refusal, at most once a ``commandInterval``, with the environment variables `passing`
        /// names besides its minimal own (``TokenCommand/environment(passing:from:)``).
        case command(String, passing: [String] = [])
    }

    public let source: Source
    /// How often the token command may run again after a refusal.
    public static let commandInterval: Duration = .seconds(60)
    /// How long the token command may take.
    public static let commandTimeout: Duration = .seconds(30)

    private struct State {
        var token: String
        /// The renewal under way, which every bundle refused meanwhile waits for.
        var renewal: Task<Void, Never>?
        var lastCommandRun: ContinuousClock.Instant?
    }
    private let state: Mutex<State>

    public init(token: String, source: Source = .fixed) {
        self.source = source
        self.state = Mutex(State(token: token))
    }

    /// The token to send now.
    public var current: String { state.withLock { $0.token } }

    /// The API refused `refused`: a different token to try, or nil when there is none (the
    /// source still holds the refused one, it cannot be read, or the command ran too recently).
    /// Bundles refused together share one renewal.
    func renewed(after refused: String, logger: Logger) async -> String? {
        if case .fixed = source { return nil }  // nothing to read again
        let renewal: Task<Void, Never>? = state.withLock { state in
            if state.token != refused { return nil }  // renewed meanwhile by another bundle
            if let renewal = state.renewal { return renewal }
            if case .command = source, let last = state.lastCommandRun,
                ContinuousClock.now - last < Self.commandInterval
            {
                return nil
            }
            if case .command = source { state.lastCommandRun = .now }
            // On the run's loops: an unstructured task inherits no executor preference.
            let renewal = Task(executorPreference: UploadExecutor.loops) { await self.readAgain(logger: logger) }
            state.renewal = renewal
            return renewal
        }
        await renewal?.value
        return state.withLock { $0.token != refused ? $0.token : nil }
    }

    private func readAgain(logger: Logger) async {
        let fresh: String?
        switch source {
        case .fixed:
            fresh = nil
        case .file(let path):
            // Off the loop: the file may be on a mount that stalls.
            fresh = await SpoolCalls.run { try? Self.readTokenFile(path) }
        case .command(let command, let passing):
            do {
                fresh = try await Self.runTokenCommand(command, passing: passing)
            } catch {
                logger.error("the token command failed", metadata: ["error": "\(error)"])
                fresh = nil
            }
        }
        let changed = state.withLock { state in
            defer { state.renewal = nil }
            guard let fresh, fresh != state.token else { return false }
            state.token = fresh
            return true
        }
        logger.notice(
            changed ? "the API token was read again: a new one" : "the API token was read again: unchanged",
            metadata: ["source": "\(describe(source))"])
    }

    private func describe(_ source: Source) -> String {
        switch source {
        case .fixed: "the environment"
        case .file(let path): "the token file \(path)"
        case .command(let command, _): "the token command \(DisplayText.escaped(command))"
        }
    }

    /// The token alone on the one line of the file; throws naming the file. A path without a "/"
    /// that cannot be read may be the token itself, given by mistake: it is never echoed.
    static func readTokenFile(_ path: String) throws(TokenCommandError) -> String {
        let contents: [UInt8]
        do {
            contents = try FileSystem.readFile(path, maxBytes: 64 * 1024)
        } catch {
            let shown =
                path.contains("/")
                ? "\(error)"
                : "the file named by token-file (not shown: with no \"/\" it may be a token given by mistake)"
            throw TokenCommandError(message: "cannot read the token file: \(shown)")
        }
        let text = String(decoding: contents, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty, !text.contains(where: \.isNewline) else {
            throw TokenCommandError(message: "the token file \(path) must hold the token alone on one line")
        }
        guard isUsableToken(text) else { throw TokenCommandError(message: unusableToken("the token file \(path)")) }
        return text
    }

    /// A token goes into an HTTP header: visible ASCII only. Anything else (a colour code from a
    /// tool's output, a stray byte) would make the header invalid, and the HTTP library's error
    /// would quote the header, token and all, into the log.
    public static func isUsableToken(_ token: String) -> Bool {
        !token.isEmpty && token.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }

    /// Why a token from `source` is refused, without a byte of it.
    public static func unusableToken(_ source: String) -> String {
        "\(source) gave a token with characters an HTTP header cannot carry (control characters, spaces or "
            + "non-ASCII); it is not used (and not shown)"
    }

    /// Runs `command` with `/bin/sh -c`, its standard error passed through to ours (the log), and
    /// returns the first line of its output; throws, naming the command, when it fails, times out
    /// or prints nothing. Its output is never shown. A command that outlives ``commandTimeout`` is
    /// ended with what it started; once its first line is read, the rest of it is not waited for.
    public static func runTokenCommand(_ command: String, passing: [String] = []) async throws(TokenCommandError)
        -> String
    {
        try await TokenCommand(command: command, seconds: Int(commandTimeout.components.seconds), passing: passing)
            .run()
    }
}

/// A token command (or token file) that could not give a token: the message names it, never the token.
public struct TokenCommandError: Error, CustomStringConvertible, Sendable {
    public let message: String
    public var description: String { message }
}
