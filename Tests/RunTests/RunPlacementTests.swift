import DopeSyncTestSupport
import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import DopeSync

/// Which of NIO's loops a run's tasks and connections are on (``UploadExecutor/placement(bundlesInFlight:)``):
/// one for a few bundles at once, every loop for many.
@Suite struct RunPlacementTests {
    @Test("up to 16 bundles at once share one loop; more take every loop there is")
    func oneLoopForAFewBundles() {
        for few in [1, 4, 16] {
            #expect(UploadExecutor.placement(bundlesInFlight: few).group is any EventLoop, "\(few)")
        }
        for many in [17, 64] {
            let group = ObjectIdentifier(UploadExecutor.placement(bundlesInFlight: many).group as AnyObject)
            let everyLoop = group == ObjectIdentifier(MultiThreadedEventLoopGroup.singleton)
            #expect(everyLoop, "\(many)")
        }
    }

    @Test(
        "a run of 4 bundles at once sends every step from one loop, where its answers arrive",
        .enabled(if: Array(MultiThreadedEventLoopGroup.singleton.makeIterator()).count > 1, "one loop is all there is"))
    func aFewBundlesStayOnOneLoop() async throws {
        try await withTemporaryDirectory { directory in
            let samples = (1...8).map { SampleSession(seed: 1_200 + UInt64($0)) }
            let spool = try await makeSpool(in: directory, samples: samples)
            // The loop each step's result was handed in on, right after its answer arrived.
            let loops = Mutex<Set<ObjectIdentifier>>([])
            var logger = Logger(label: "test") { _ in
                MessageHandler { message in
                    guard message == "step done", let loop = MultiThreadedEventLoopGroup.currentEventLoop else {
                        return
                    }
                    _ = loops.withLock { $0.insert(ObjectIdentifier(loop as AnyObject)) }
                }
            }
            logger.logLevel = .debug
            try await withDevServer { server in
                var options = RunOptions(spoolRoot: spool.root, apiURL: server.baseURL, token: server.token)
                options.minAge = .zero
                options.minFreeSpace = .bytes(0)
                options.concurrency = 4
                let (summary, status) = await Worker(options: options, logger: logger).run()
                #expect(status == .success)
                #expect(summary.done == samples.count)
            }
            // Spread over two loops, each answer woke a loop that had gone to sleep, and a task
            // resumed by the writer went to the next loop in turn.
            let count = loops.withLock { $0.count }
            #expect(count == 1, "the steps were handed in on \(count) loops")
        }
    }
}
