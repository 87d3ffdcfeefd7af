import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Synchronization
import Testing

@testable import DopeSync

/// The built `dopesync run` (its tasks on NIO's event loops) while another process holds the
/// checkpoint database's write lock: only the checkpoint writer's thread waits for it.
@Suite struct WriteLockHeldElsewhereTests {
    /// One redraw of the progress line, as the test saw it arrive.
    struct Tick: Sendable {
        let at: ContinuousClock.Instant
        let requests: Int
    }

    @Test(
        "another process holds the write lock for 5 s mid-run: the progress line keeps ticking and answers in flight are read; released, the run finishes normally",
        .timeLimit(.minutes(2)))
    func eventLoopsKeepRunningWhileAnotherProcessWrites() async throws {
        try await withTemporarySpool { spool, scratch in
            let bundles = 4
            for seed in 1...bundles {
                try pack(SampleSession(seed: UInt64(9_100 + seed), shape: .realistic), into: spool, scratch: scratch)
            }
            _ = try CheckpointStore(spool: spool)  // migrated, so the run opens it without the lock
            var configuration = DevServerConfiguration()
            // A request of each bundle in flight at almost any moment.
            configuration.faults.latencyMilliseconds = 100...100
            try await withDevServer(configuration) { server async throws in
                // Standard error (the progress line and the log) on the pipe the test reads.
                let run = try Spawned(
                    "/bin/sh",
                    [
                        "-c", #"exec "$0" "$@" 2>&1 >/dev/null"#, builtProduct("dopesync").path,
                        "run", "--spool", spool.root, "--api", server.baseURL, "--min-age", "0", "--progress", "always",
                        "--concurrency", "4",
                    ],
                    environment: ProcessInfo.processInfo.environment.merging(["DOPESYNC_API_TOKEN": server.token]) {
                        $1
                    })
                let ticks = Self.progressTicks(of: run)

                var holder: Spawned? = nil
                var lockedAt: ContinuousClock.Instant? = nil
                var requestsWhenLocked = 0
                var releasedAt: ContinuousClock.Instant? = nil
                var held: [Tick] = []
                for await tick in ticks {
                    if lockedAt == nil, tick.requests > 0 {
                        // Uploads are under way: another process takes the lock (flock(1) keeps it until its input closes).
                        let locker = try Spawned(
                            "/usr/bin/flock", ["-o", spool.databaseLockPath, "sh", "-c", "echo locked; exec cat"])
                        #expect(await onOwnThread { locker.output.readLine() } == "locked")
                        (holder, lockedAt, requestsWhenLocked) = (locker, .now, tick.requests)
                    } else if let locked = lockedAt, releasedAt == nil {
                        held.append(tick)
                        if tick.at - locked >= .seconds(5), let holder {
                            try holder.input.close()  // flock(1) lets go once `cat` ends
                            #expect(await holder.finished() == 0)
                            releasedAt = .now
                        }
                    }
                }
                let status = await run.finished()

                let locked = try #require(lockedAt, "the run showed requests under way")
                let released = try #require(releasedAt, "the run was still going after 5 s of the lock held elsewhere")
                #expect(released - locked >= .seconds(5))
                // The progress line is redrawn every 500 ms by a task on an event loop: it went on
                // all through (before the writer thread, the loops waited with the lock and no
                // line came for the whole 5 s).
                let instants = [locked] + held.map(\.at)
                let longestGap = zip(instants, instants.dropFirst()).map { $1 - $0 }.max() ?? .zero
                #expect(held.count >= 8, "about ten redraws in 5 s; saw \(held.count)")
                #expect(longestGap < .milliseconds(1_500), "the progress line stopped for \(longestGap)")
                // Answers to the requests in flight were read while nothing could be checkpointed
                // (the progress line counts a request once its answer is read).
                let last = try #require(held.last)
                #expect(
                    last.requests > requestsWhenLocked,
                    "requests answered while the lock was held: \(requestsWhenLocked) → \(last.requests)")

                #expect(status == 0, "the run waited for the lock (10 s busy timeout), then finished normally")
                #expect(try spool.list(.done).count == bundles)
                #expect(
                    try spool.list(.incoming).isEmpty && spool.list(.processing).isEmpty && spool.list(.failed).isEmpty)
                #expect(try await server.createdCounts()["session"] == bundles, "each session created once")
            }
        }
    }

    /// The progress redraws of `run` (lines starting with "\r", as on a terminal) as they arrive,
    /// read on a thread of its own; the stream ends when the run closes its output.
    static func progressTicks(of run: Spawned) -> AsyncStream<Tick> {
        let (ticks, continuation) = AsyncStream.makeStream(of: Tick.self)
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
                        continuation.yield(Tick(at: now, requests: requests))
                    }
                }
                if !pieces.isEmpty { lastCounted = false }
                last = tail
                if !lastCounted, let match = last.firstMatch(of: redraw), let requests = Int(match.1) {
                    continuation.yield(Tick(at: now, requests: requests))
                    lastCounted = true
                }
            }
            continuation.finish()
        }.start()
        return ticks
    }
}
