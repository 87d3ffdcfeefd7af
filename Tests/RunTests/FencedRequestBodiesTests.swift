import DopeSyncBundle
import DopeSyncStore
import DopeSyncTestSupport
import Testing

@testable import DopeSync

/// `APIClient.send` puts every body of a claim that can run out behind the fence, whatever the
/// body is and whether a rate cap paces it: a JSON step, an image kept from validation, an image
/// streamed from the archive. Measured where a user would look, between the worker and the API
/// (a counting proxy over real sockets to the dev server): a claim gone once the head has left
/// lets no request reach the server whole; a claim that holds sends it as before.
@Suite(.timeLimit(minutes: 3)) struct FencedRequestBodiesTests {
    enum Body: String, CaseIterable, Sendable {
        case json, imageKeptFromValidation, imageStreamedFromTheArchive
    }

    struct Sent {
        var answer: StepResponse
        /// Complete POSTs the proxy saw while the step was sent.
        var completePosts: Int
        /// Bytes the worker put into the proxy's tunnel for it (the head included), and the body's length.
        var bytes: Int64
        var bodyLength: Int64
        /// Records the API created while the step was sent.
        var created: Int
    }

    @Test(
        "a claim gone once the head has left: the request never reaches the API whole, for every body, capped or not",
        arguments: Body.allCases, [false, true])
    func aClaimGoneCutsEveryBodyShort(body: Body, capped: Bool) async throws {
        let sent = try await Self.sendStep(body, capped: capped, claimHeld: false)
        #expect(sent.completePosts == 0, "the API got the whole request")
        #expect(sent.created == 0)
        guard case .retryable(nil, _, let message) = sent.answer else {
            Issue.record("not a request cut short: \(sent.answer)")
            return
        }
        #expect(message.contains("claim ran out"), "\(message)")
    }

    @Test("a claim that holds: the same request reaches the API whole and creates its record", arguments: Body.allCases)
    func aHeldClaimSendsEveryBodyWhole(body: Body) async throws {
        let sent = try await Self.sendStep(body, capped: true, claimHeld: true)
        #expect(sent.completePosts == 1 && sent.created == 1)
        #expect(sent.bytes > sent.bodyLength)
        guard case .created = sent.answer else {
            Issue.record("not created: \(sent.answer)")
            return
        }
    }

    /// Uploads a sample's steps in order, straight to the dev server, up to the first step of
    /// `body`'s kind, then sends that one through a counting proxy with `claimHeld` as the fence.
    static func sendStep(_ body: Body, capped: Bool, claimHeld: Bool) async throws -> Sent {
        try await withTemporarySpool { spool, scratch in
            var shape = SampleSession.Shape()
            // Kept from validation up to a read chunk (256 KiB); larger ones stream.
            shape.imageBytes = body == .imageStreamedFromTheArchive ? 600 * 1024 : 16 * 1024
            let sample = SampleSession(seed: 9_700 + UInt64(Body.allCases.firstIndex(of: body)!), shape: shape)
            let name = try pack(sample, into: spool, scratch: scratch)
            let bundle = try BundleInspector().inspect(path: spool.path(.incoming, name))
            let plan = try UploadPlan(session: bundle.session, images: bundle.images)
            let target = try #require(plan.steps.firstIndex { body == .json ? $0.kind == .session : $0.kind == .image })
            if case .image(let image, _, _) = plan.steps[target].payload {
                #expect((image.bytes != nil) == (body == .imageKeptFromValidation), "the image is sent as \(body)")
            }
            let images = ArchiveImages(bundle: bundle)
            do {
                let sent = try await Self.send(plan, upTo: target, images: images, capped: capped, claimHeld: claimHeld)
                await images.close()
                return sent
            } catch {
                await images.close()
                throw error
            }
        }
    }

    /// The proxy, the dev server and the client share this test process with the suite's other
    /// tests: a connection through the proxy can take longer than production's 5 s when they all
    /// start at once. What is measured is the fence, not the time.
    static var patient: APIClient.Timeouts {
        var timeouts = APIClient.Timeouts()
        timeouts.connect = .seconds(60)
        timeouts.request = .seconds(60)
        return timeouts
    }

    static func send(
        _ plan: UploadPlan, upTo target: Int, images: ArchiveImages, capped: Bool, claimHeld: Bool
    ) async throws -> Sent {
        try await withDevServer { server in
            var serverIDs: [String: Int64] = [:]
            try await APIClient.with(
                baseURL: server.baseURL, credential: Credential(token: server.token), connections: 1,
                timeouts: Self.patient
            ) { client in
                for step in plan.steps[..<target] {
                    let path = try #require(step.path(serverIDs: serverIDs))
                    // Set-up only: a loaded machine's timeout is tried again (the server honours keys).
                    var answer = await client.send(step, path: path, images: images).0
                    for _ in 0..<2 {
                        guard case .retryable = answer else { break }
                        answer = await client.send(step, path: path, images: images).0
                    }
                    guard case .created(let id, _) = answer else {
                        throw FencedStepError.earlierStepNotCreated(step.key, "\(answer)")
                    }
                    serverIDs[step.key] = id
                }
            }
            let step = plan.steps[target]
            let path = try #require(step.path(serverIDs: serverIDs))
            let before = try await server.createdCounts().values.reduce(0, +)
            return try await CountingProxy.with { proxy in
                let network = APIClient.Network(
                    proxy: HTTPProxy(host: "127.0.0.1", port: proxy.port),
                    rateLimit: capped ? UploadRateLimit(bytesPerSecond: 64 << 20) : nil)
                let (answer, length) = try await APIClient.with(
                    baseURL: server.baseURL, credential: Credential(token: server.token), connections: 1,
                    timeouts: Self.patient, network: network
                ) { client in
                    await client.send(step, path: path, images: images, claimHeld: { claimHeld })
                }
                let counts = proxy.snapshot
                let after = try await server.createdCounts().values.reduce(0, +)
                return Sent(
                    answer: answer, completePosts: counts.wholeRequests["POST"] ?? 0, bytes: counts.bytesFromClient,
                    bodyLength: length, created: after - before)
            }
        }
    }

    enum FencedStepError: Error { case earlierStepNotCreated(String, String) }
}
