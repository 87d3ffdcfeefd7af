import ArgumentParser
import DopeSync
import DopeSyncTestSupport
import Foundation
import Logging
import NIOPosix

/// `dopesync-bench make-bundles`: realistic bundles (about 50 requests, a few images each) packed
/// into a spool's incoming/, as clients would drop them.
struct MakeBundles: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "make-bundles", abstract: "Pack realistic sample bundles into a spool.")

    @Option(help: "The spool to fill.") var spool: String
    @Option(help: "How many bundles.") var count = 300
    @Option(help: "Seed of the first bundle.") var seed: UInt64 = 1
    @Option(help: "Images per group (4 groups).") var imagesPerGroup = 1
    @Option(help: "Bytes per image.") var imageBytes = 64 * 1024
    @Option(help: "Groups per bundle.") var groups = 4

    func run() async throws {
        // Packing calls libarchive: on NIO's blocking pool, never an event loop (`BlockingCalls`).
        let requests = try await NIOThreadPool.singleton.runIfActive { [self] in try pack() }
        print("packed \(count) bundles, \(requests) requests in all (\(requests / max(count, 1)) a bundle)")
    }

    /// Packs the bundles; returns how many requests they hold in all.
    private func pack() throws -> Int {
        try Spool(root: spool).create()
        let scratch = try makeTemporaryDirectory("make-bundles")
        defer { try? FileManager.default.removeItem(at: scratch) }  // scratch in /tmp: a leftover harms nothing
        let shape = SampleSession.Shape.realistic.withImages(
            groups: groups, perGroup: imagesPerGroup, bytes: imageBytes)
        var requests = 0
        for index in 0..<count {
            let sample = SampleSession(seed: seed &+ UInt64(index), shape: shape)
            let source = scratch.appendingPathComponent("s\(index)")
            try sample.writeLayout(to: source)
            try BundlePacker().pack(
                sessionFile: source.appendingPathComponent("session.json").path, imagesDirectory: nil,
                destination: .spool(root: spool))
            try FileManager.default.removeItem(at: source)
            requests += sample.expectedRequestCount
        }
        return requests
    }
}

/// `dopesync-bench raw-capacity`: the dev server's capacity for the same request mix and
/// concurrency as a run, with nothing of the worker around it — bodies prepared in memory, no
/// archive reading, no checkpoints, no spool moves. The ceiling the worker is measured against.
struct RawCapacity: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "raw-capacity", abstract: "Send every bundle's requests straight to the API.")

    @Option(help: "A spool whose incoming/ holds the bundles.") var spool: String
    @Option(help: "The API's base URL.") var api: String
    @Option(help: "The API token.") var token = "dev-token"
    @Option(help: "Bundles sent at once (each one's steps in order).") var concurrency = 4
    @Option(help: "A PEM file of CA certificates trusted for an https API.") var caFile: String?

    func run() async throws {
        let folder = Spool(root: spool).path(.incoming)
        // Prepare everything first, off the event loops (libarchive): plans and image bytes in memory.
        let work = try await NIOThreadPool.singleton.runIfActive { try Self.prepare(folder) }
        let queue = WorkQueue(work)
        let started = ContinuousClock.now
        let cpuBefore = processCPUSeconds()
        let requests = try await APIClient.with(
            baseURL: api, credential: Credential(token: token), connections: concurrency,
            network: APIClient.Network(caFile: caFile)
        ) { client in
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<concurrency {
                    group.addTask {
                        var sent = 0
                        while let (plan, images) = queue.next() {
                            var ids: [String: Int64] = [:]
                            for step in plan.steps {
                                let response = await client.sendPrepared(
                                    step, path: step.path(serverIDs: ids)!, images: images)
                                guard case .created(let id, _) = response else {
                                    throw ValidationError("step \(step.key): \(response)")
                                }
                                ids[step.key] = id
                                sent += 1
                            }
                        }
                        return sent
                    }
                }
                return try await group.reduce(0, +)
            }
        }
        let seconds = (ContinuousClock.now - started) / .seconds(1)
        let cpu = processCPUSeconds() - cpuBefore
        print(
            String(
                format:
                    "raw capacity: %d bundles, %d requests in %.2f s: %.1f bundles/s, %.0f requests/s; client CPU %.2f s per 1000 requests",
                work.count, requests, seconds, Double(work.count) / seconds, Double(requests) / seconds,
                cpu / Double(requests) * 1000))
    }
}

/// User plus system CPU time of this process so far: what the load generator itself costs
/// while it sends, next to the worker's CPU time for the same requests.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

extension RawCapacity {
    /// Every bundle of `folder`'s plan and image bytes.
    static func prepare(_ folder: String) throws -> [(UploadPlan, [String: [UInt8]])] {
        let names = try FileManager.default.contentsOfDirectory(atPath: folder).filter { !$0.hasPrefix(".") }.sorted()
        var work: [(UploadPlan, [String: [UInt8]])] = []
        for name in names {
            let bundle = try BundleInspector().inspect(path: folder + "/" + name)
            let reader = BundleEntryReader(bundle: bundle)
            var images: [String: [UInt8]] = [:]
            for image in bundle.images.values {
                var bytes: [UInt8] = []
                try reader.withImageChunks(image) { bytes.append(contentsOf: $0) }
                images[image.fileName] = bytes
            }
            work.append((try UploadPlan(session: bundle.session, images: bundle.images), images))
        }
        return work
    }
}
