import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync
@testable import DopeSyncStore

/// Two bundles of one session (a producer that sends a session again, `S.tar.gz` and
/// `S.1.tar.gz`) are never uploaded at the same time (``SessionHold``): each would look on the
/// server before the other's records were there and, against an API that ignores keys, send them
/// again. Over real sockets to the dev server, with the built `dopesync run`.
@Suite(.timeLimit(minutes: 2)) struct OneBundleOfASessionAtATimeTests {
    @Test(
        "two bundles of one session in one run, against an API that ignores keys: one uploads, the other waits for the next run, and every record exists once"
    )
    func twoBundlesOfASessionInOneRun() async throws {
        try await withTemporarySpool { spool, scratch in
            let sample = SampleSession(seed: 9_800, shape: .realistic)
            let first = try pack(sample, into: spool, scratch: scratch)
            let second = try pack(sample, into: spool, scratch: scratch.appendingPathComponent("again"))
            #expect(try spool.names(.incoming) == [first, second].sorted())
            var configuration = DevServerConfiguration()
            configuration.ignoreIdempotencyKeys = true
            // Each bundle's 50 POSTs take half a second or more: both are claimed and read
            // while the first still uploads.
            configuration.faults.latencyMilliseconds = 10...10
            try await withDevServer(configuration) { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, ["--concurrency", "2"])
                #expect(status == 0, "\(output)")
                #expect(output.contains("another bundle of this session is being uploaded"), "\(output)")
                #expect(try spool.names(.done).count == 1 && spool.names(.incoming).count == 1)

                let (again, againOutput) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(again == 0, "\(againOutput)")
                #expect(try spool.names(.done).count == 2)
                // One session (the lookup fails on two), and each of its records once.
                let tree = try await server.sessionTree(clientID: sample.sessionID)
                #expect(tree.dope.count == 15)
                #expect(tree.chrono.map(\.readings.count) == [10, 10])
                #expect(tree.groups.map(\.images.count) == [1, 1, 1, 1])
            }
        }
    }

    @Test("a session held by another process is busy, and its hold ends with that process, however it ends")
    func aHoldEndsWithItsHolder() async throws {
        try await withTemporarySpool { spool, _ in
            let sessionID = "5e2b8a1c-0d4f-4b7e-9a3c-2f6d8e1b4c7a"
            let lock = spool.root + "/" + SessionHold.folder + "/" + sessionID
            // Another process holds the session's lock as a run's bundle would (the shell's own
            // descriptor, which `flock` locks), then is killed.
            let holder = try await Spawned(
                "/bin/sh", ["-c", #"mkdir -p "${0%/*}" && exec 9>"$0" && flock -n 9 && echo held && read line"#, lock])
            #expect(await holder.firstLine(containing: "held") != nil)
            #expect(try await SpoolCalls.run { () throws(SpoolError) in try spool.holdSession(sessionID) } == nil)
            holder.kill(SIGKILL)
            _ = await holder.finished()
            let hold = try await SpoolCalls.run { () throws(SpoolError) in try spool.holdSession(sessionID) }
            #expect(hold != nil, "the holder is gone")
            // Held here now: a second ask, as another slot's, is busy until released.
            #expect(try await SpoolCalls.run { () throws(SpoolError) in try spool.holdSession(sessionID) } == nil)
            await SpoolCalls.run { hold?.release() }
        }
    }
}
