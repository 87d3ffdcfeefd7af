import ArgumentParser
import Foundation

extension CommandOutcome {
    /// Prints what a library command said and ends the command with its status (an
    /// argument-parser `ExitCode` unless it succeeded): the last line of every command's `run()`.
    package func printAndExit() throws {
        if !output.isEmpty { print(output) }
        if let diagnostics {
            FileHandle.standardError.write(Data((diagnostics + "\n").utf8))
        }
        if status != .success { throw ExitCode(status.rawValue) }
    }
}
