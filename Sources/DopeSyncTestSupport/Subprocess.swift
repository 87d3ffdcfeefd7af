import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The result of a finished child process.
public struct ProcessOutput: Sendable {
    /// Its exit status, or 128 + the signal that ended it (as a shell says it).
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

/// Runs a program to its end and collects its output; `executable` is looked up in PATH, and
/// `environment` is added to this process's. `stdin`, if any, is written to the child's standard
/// input, which is then closed (without it, the child reads an empty input).
///
/// A ``Spawned`` child (it inherits standard input, output and error only), and every blocking
/// call waits on a thread of its own (see ``onOwnThread(_:)``), never on the cooperative pool.
@discardableResult
public func runProcess(
    _ executable: String,
    _ arguments: [String],
    in directory: URL? = nil,
    environment: [String: String]? = nil,
    stdin: Data? = nil,
    allowFailure: Bool = false
) async throws -> ProcessOutput {
    let child = try Spawned(
        "/usr/bin/env", [executable] + arguments,
        environment: ProcessInfo.processInfo.environment.merging(environment ?? [:]) { $1 }, in: directory,
        errors: .piped)
    let output = await child.collect(writing: stdin ?? Data())
    if !allowFailure && output.status != 0 {
        throw ProcessFailure(command: [executable] + arguments, output: output)
    }
    return output
}

extension Spawned {
    /// Writes `data` to the child's input and closes it, reads its output and errors (if piped) to
    /// their ends meanwhile, so that a chatty child never blocks on a full pipe, then waits for it
    /// to end: each on a thread of its own.
    func collect(writing data: Data) async -> ProcessOutput {
        async let written: Void = onOwnThread { [input] in
            // A child that exits without reading its input makes the write fail (EPIPE): its exit
            // status says what went wrong. The SIGPIPE that comes with it stays pending on this
            // thread, which then ends, instead of ending the test process.
            var pipeSignal = sigset_t()
            sigemptyset(&pipeSignal)
            sigaddset(&pipeSignal, SIGPIPE)
            pthread_sigmask(SIG_BLOCK, &pipeSignal, nil)
            if !data.isEmpty { try? input.write(contentsOf: data) }
            try? input.close()
        }
        async let errorData = onOwnThread { [errors] in errors?.readDataToEndOfFile() ?? Data() }
        let outputData = await onOwnThread { [output] in output.readDataToEndOfFile() }
        await written
        return ProcessOutput(
            status: await finished(), stdout: String(decoding: outputData, as: UTF8.self),
            stderr: String(decoding: await errorData, as: UTF8.self))
    }
}
