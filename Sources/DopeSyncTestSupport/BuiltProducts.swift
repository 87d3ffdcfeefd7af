import DopeSync
import Foundation

/// The folder holding the executables this package built: the same folder as the test runner
/// (`.build/debug/` or wherever `--scratch-path` put it).
public func builtProduct(_ name: String) -> URL {
    var folder = testRunner.deletingLastPathComponent()
    // On Linux the test runner is `…/debug/dopesyncPackageTests.xctest`; on Darwin it is a bundle.
    while folder.pathExtension == "xctest" || folder.lastPathComponent == "MacOS"
        || folder.lastPathComponent == "Contents"
    {
        folder.deleteLastPathComponent()
    }
    return folder.appendingPathComponent(name)
}

/// The test runner itself (`…/debug/dopesyncPackageTests.xctest` on Linux), for a child run of it.
public var testRunner: URL { URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath() }

/// Runs a built executable of this package and returns its exit status and output.
@discardableResult
public func runBuilt(
    _ name: String, _ arguments: [String], in directory: URL? = nil, environment: [String: String]? = nil
) async throws -> ProcessOutput {
    try await runProcess(
        builtProduct(name).path, arguments, in: directory, environment: environment, allowFailure: true)
}

/// `dopesync ARGUMENTS` as `user` (through `runuser`, as an operator runs it as the worker's
/// user), with the API's `token` and no free-space floor; its status and output, whatever it exits with.
public func runDopesync(as user: String, _ arguments: [String], token: String, environment: [String: String] = [:])
    async throws -> ProcessOutput
{
    try await runProcess(
        "/usr/sbin/runuser", ["-u", user, "--", builtProduct("dopesync").path] + arguments,
        environment: environment.merging(["DOPESYNC_API_TOKEN": token, "DOPESYNC_MIN_FREE_SPACE": "0"]) { $1 },
        allowFailure: true)
}

/// `dopesync run` of `spool` against `server` as `user`, every bundle due at once
/// (``runDopesync(as:_:token:environment:)``).
public func runDopesync(
    as user: String, run spool: Spool, against server: RunningDevServer, environment: [String: String] = [:]
) async throws -> ProcessOutput {
    try await runDopesync(
        as: user, ["run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0"], token: server.token,
        environment: environment)
}
