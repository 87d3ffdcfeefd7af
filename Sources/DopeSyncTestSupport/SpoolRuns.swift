import DopeSync
import Foundation
import Logging

/// A fresh spool (all five folders) in a temporary directory removed when `body` returns; `body` also gets
/// the directory, for scratch files beside the spool.
public func withTemporarySpool<T>(_ body: (Spool, URL) async throws -> T) async throws -> T {
    try await withTemporaryDirectory { directory in
        let spool = Spool(root: directory.appendingPathComponent("spool").path)
        try spool.create()
        return try await body(spool, directory)
    }
}

/// Packs `sample` into the spool's `incoming/` as `dopesync pack --spool` does, its layout written under
/// `scratch`. Returns the bundle's name.
@discardableResult
public func pack(_ sample: SampleSession, into spool: Spool, scratch: URL) throws -> String {
    let source = scratch.appendingPathComponent("src-\(sample.sessionID)")
    try sample.writeLayout(to: source)
    let path = try BundlePacker().pack(
        sessionFile: source.appendingPathComponent("session.json").path, imagesDirectory: nil,
        destination: .spool(root: spool.root))
    return (path as NSString).lastPathComponent
}

/// One `dopesync run` in-process with test timings: no min-age guard, retries backing off in milliseconds,
/// logs dropped.
public func runWorker(_ spool: Spool, apiURL: String, token: String) async -> (RunSummary, DopeSync.ExitStatus) {
    var options = RunOptions(spoolRoot: spool.root, apiURL: apiURL, token: token)
    options.minAge = .zero
    options.retry.base = .milliseconds(1)
    options.retry.cap = .milliseconds(5)
    return await Worker(
        options: options, logger: Logger(label: "dopesync.test", factory: { _ in SwiftLogNoOpLogHandler() })
    ).run()
}

/// The built `dopesync run` as a child process on `spool` against `server` (its token in the
/// environment, no min-age guard), standard error silenced; `extra` adds options.
public func spawnRun(_ spool: Spool, against server: RunningDevServer, _ extra: [String] = []) throws -> Spawned {
    var environment = ProcessInfo.processInfo.environment
    environment["DOPESYNC_API_TOKEN"] = server.token
    let arguments =
        ["run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0", "--progress", "never"] + extra
    return try Spawned(builtProduct("dopesync").path, arguments, environment: environment, silenceErrors: true)
}
