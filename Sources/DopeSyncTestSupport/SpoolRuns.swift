import DopeSync
import Foundation
import Logging

/// A fresh spool (all five folders) in a temporary directory removed when `body` returns; `body` also gets
/// the directory, for scratch files beside the spool.
public func withTemporarySpool<T>(_ body: (Spool, URL) async throws -> T) async throws -> T {
    try await withTemporaryDirectory { directory in
        let spool = Spool(root: directory.appendingPathComponent("spool").path)
        try await spool.create()
        return try await body(spool, directory)
    }
}

/// A spool under `directory` with each sample packed into `incoming/` as `dopesync pack` does.
///
/// Packing writes archives with blocking calls: on a thread of its own, so that the suite's
/// other tests, which share the test process's two cooperative threads, are not held (an
/// in-process dev server there once answered a request seconds late).
public func makeSpool(in directory: URL, samples: [SampleSession]) async throws -> Spool {
    let spool = Spool(root: directory.appendingPathComponent("spool").path)
    try await onOwnThread { () -> Result<Void, any Error> in
        Result {
            try spool.create()
            for sample in samples { try pack(sample, into: spool, scratch: directory) }
        }
    }.get()
    return spool
}

extension Spool {
    /// Gives the spool, its folders and `files` (paths) to `uid`, as the packaged spool is the
    /// worker user's, and opens `directory` (the spool's parent) to everyone: a run as that user
    /// then meets only the permissions a test sets on purpose. Returns whether every change took.
    public func give(to uid: uid_t, with files: [String] = [], opening directory: URL) -> Bool {
        var changed = chmod(directory.path, 0o755) == 0
        for path in [root] + Folder.allCases.map({ self.path($0) }) + files {
            changed = chown(path, uid, uid) == 0 && changed
        }
        return changed
    }
}

/// Whether the dev server honours `Idempotency-Key` (docs/api.yaml) or ignores it, as an existing
/// backend may: exactly once must hold against both (the second through look-before-resend).
/// The arguments of every test that proves it.
public let keysHonouredOrIgnored = [true, false]

/// Logs nobody reads: for runs in-process whose outcome the test reads from the spool and server.
public let quietLogger = Logger(label: "dopesync.test", factory: { _ in SwiftLogNoOpLogHandler() })

extension Spool {
    /// The names in one of the spool's folders, sorted, without dot-files (as a person's `ls`).
    public func names(_ folder: Folder) throws -> [String] {
        try fileNames(in: path(folder)).filter { !$0.hasPrefix(".") }
    }
}

/// Every name in a folder, sorted; throws if the folder cannot be read.
public func fileNames(in folder: String) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: folder).sorted()
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
    options.minFreeSpace = .bytes(0)  // a test's outcome must not hang on the machine's free disk
    return await Worker(options: options, logger: quietLogger).run()
}

/// The built `dopesync run` as a child process on `spool` against `server` (its token in the
/// environment, no min-age guard), standard error silenced unless `errors` says otherwise;
/// `extra` adds options.
public func spawnRun(
    _ spool: Spool, against server: RunningDevServer, _ extra: [String] = [], environment more: [String: String] = [:],
    errors: Spawned.ErrorOutput = .silenced
) async throws -> Spawned {
    var environment = childEnvironment.merging(more) { $1 }
    environment["DOPESYNC_API_TOKEN"] = server.token
    environment["DOPESYNC_MIN_FREE_SPACE"] = "0"  // a test's outcome must not hang on the machine's free disk
    let arguments =
        ["run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0", "--progress", "never"] + extra
    return try await Spawned(builtProduct("dopesync").path, arguments, environment: environment, errors: errors)
}

/// The built `dopesync run` as ``spawnRun(_:against:_:)`` starts it, but logging at debug level
/// into its output (standard error joined to standard output): a test waits for what it logs.
public func spawnRunLogging(
    _ spool: Spool, against server: RunningDevServer, _ extra: [String] = [], environment more: [String: String] = [:]
) async throws -> Spawned {
    var environment = childEnvironment.merging(more) { $1 }
    environment["DOPESYNC_API_TOKEN"] = server.token
    environment["DOPESYNC_MIN_FREE_SPACE"] = "0"
    let arguments = [
        "-c", #"exec "$0" "$@" 2>&1"#, builtProduct("dopesync").path, "run", "--spool", spool.root, "--api",
        server.baseURL, "--min-age", "0", "--progress", "never", "--log-level", "debug",
    ]
    return try await Spawned("/bin/sh", arguments + extra, environment: environment)
}

/// One redraw of `dopesync run`'s progress line, as a test saw it arrive.
public struct ProgressTick: Sendable {
    public let at: ContinuousClock.Instant
    /// The requests answered so far, as the line shows them.
    public let requests: Int
}

/// The built `dopesync run` as ``spawnRun(_:against:_:)`` starts it, but with `--progress always`
/// and its standard error (the progress line and the log) on the child's output, read on a thread
/// of its own: each redraw arrives on the stream as it is written, which ends with the run.
public func spawnRunShowingProgress(
    _ spool: Spool, against server: RunningDevServer, _ extra: [String] = []
) async throws -> (Spawned, AsyncStream<ProgressTick>) {
    var environment = childEnvironment
    environment["DOPESYNC_API_TOKEN"] = server.token
    environment["DOPESYNC_MIN_FREE_SPACE"] = "0"  // a test's outcome must not hang on the machine's free disk
    let arguments = [
        "-c", #"exec "$0" "$@" 2>&1 >/dev/null"#, builtProduct("dopesync").path,
        "run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0", "--progress", "always",
    ]
    let run = try await Spawned("/bin/sh", arguments + extra, environment: environment)
    let (ticks, continuation) = AsyncStream.makeStream(of: ProgressTick.self)
    Thread {
        let redraw = /bundles \(.*\), (\d+) requests, .* req\/s/
        // Each redraw is "\r\u{1B}[2K" + the line. The text after the last "\r" may be a redraw
        // still being written: it counts once complete, and only once.
        var last = ""
        var lastCounted = false
        while true {
            let data = run.output.availableData  // blocks until the run writes or ends
            guard !data.isEmpty else { break }
            let now = ContinuousClock.now
            var pieces = (last + String(decoding: data, as: UTF8.self)).split(
                separator: "\r", omittingEmptySubsequences: false)
            let tail = String(pieces.removeLast())
            // pieces[0], if any, is `last` completed.
            for (index, piece) in pieces.enumerated() where !(index == 0 && lastCounted) {
                if let match = piece.firstMatch(of: redraw), let requests = Int(match.1) {
                    continuation.yield(ProgressTick(at: now, requests: requests))
                }
            }
            if !pieces.isEmpty { lastCounted = false }
            last = tail
            if !lastCounted, let match = last.firstMatch(of: redraw), let requests = Int(match.1) {
                continuation.yield(ProgressTick(at: now, requests: requests))
                lastCounted = true
            }
        }
        continuation.finish()
    }.start()
    return (run, ticks)
}

/// The built `dopesync run` on `spool` against `apiURL` to its end, as cron would start it: the
/// environment the test's own minus any proxy variables, plus `environment`. Returns the exit
/// status and everything it wrote (standard output and error together).
public func runToEnd(
    _ spool: Spool, apiURL: String, token: String, _ extra: [String] = [], environment: [String: String] = [:]
) async throws -> (status: Int32, output: String) {
    var variables = childEnvironment.filter { !proxyVariables.contains($0.key) }
    variables["DOPESYNC_API_TOKEN"] = token
    variables["DOPESYNC_MIN_FREE_SPACE"] = "0"  // a test's outcome must not hang on the machine's free disk
    variables.merge(environment) { $1 }
    let arguments = [
        "-c", #"exec "$0" "$@" 2>&1"#, builtProduct("dopesync").path,
        "run", "--spool", spool.root, "--api", apiURL, "--min-age", "0", "--progress", "never",
    ]
    let run = try await Spawned("/bin/sh", arguments + extra, environment: variables)
    let output = await onOwnThread { run.output.readDataToEndOfFile() }
    return (await run.finished(), String(decoding: output, as: UTF8.self))
}

/// The variables that send a run through a proxy, as curl reads them.
public let proxyVariables: Set<String> = [
    "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY",
    "DOPESYNC_PROXY",
]
