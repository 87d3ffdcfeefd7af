import Foundation

/// The result of a finished child process.
public struct ProcessOutput: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

public struct ProcessFailure: Error, CustomStringConvertible {
    public var command: [String]
    public var output: ProcessOutput
    public var description: String {
        "`\(command.joined(separator: " "))` exited \(output.status): \(output.stderr)\(output.stdout)"
    }
}

/// Runs a program to its end and collects its output; `executable` is looked up in PATH.
@discardableResult
public func runProcess(
    _ executable: String,
    _ arguments: [String],
    in directory: URL? = nil,
    environment: [String: String]? = nil,
    stdin: Data? = nil,
    allowFailure: Bool = false
) throws -> ProcessOutput {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = [executable] + arguments
    if let directory { process.currentDirectoryURL = directory }
    if let environment {
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    }
    let stdoutPipe = Pipe()
    let stderrPipe = Pipe()
    process.standardOutput = stdoutPipe
    process.standardError = stderrPipe
    let stdinPipe = Pipe()
    process.standardInput = stdin == nil ? FileHandle.nullDevice : stdinPipe
    try process.run()
    if let stdin {
        stdinPipe.fileHandleForWriting.write(stdin)
        try stdinPipe.fileHandleForWriting.close()
    }
    // Read both pipes before waiting, so a chatty child cannot fill a pipe and block.
    let group = DispatchGroup()
    nonisolated(unsafe) var errData = Data()
    group.enter()
    DispatchQueue.global().async {
        errData = stderrPipe.fileHandleForReading.readDataToEndOfFile()
        group.leave()
    }
    let outData = stdoutPipe.fileHandleForReading.readDataToEndOfFile()
    group.wait()
    process.waitUntilExit()
    let output = ProcessOutput(
        status: process.terminationStatus,
        stdout: String(decoding: outData, as: UTF8.self),
        stderr: String(decoding: errData, as: UTF8.self)
    )
    if !allowFailure && output.status != 0 {
        throw ProcessFailure(command: [executable] + arguments, output: output)
    }
    return output
}
