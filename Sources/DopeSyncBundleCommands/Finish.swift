import ArgumentParser
import Foundation

/// Prints what a library command said and ends the process with its status.
public func finish(_ outcome: CommandOutcome) throws {
    if !outcome.output.isEmpty { print(outcome.output) }
    if let diagnostics = outcome.diagnostics {
        FileHandle.standardError.write(Data((diagnostics + "\n").utf8))
    }
    if outcome.status != .success { throw ExitCode(outcome.status.rawValue) }
}
