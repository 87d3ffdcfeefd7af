import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// The built `dopesync run` over the networks production has: HTTPS with a private CA, a proxy
/// (CONNECT, as curl users expect it), a cap on the upload rate. Real certificates made by
/// `openssl`, the real dev server over TLS, a real proxy on loopback counting what it tunnels.
@Suite(.timeLimit(minutes: 3)) struct NetworkTests {
    /// Packs `count` realistic bundles; returns their names.
    @discardableResult
    func packBundles(_ count: Int, seed: UInt64, into spool: Spool, scratch: URL, imageBytes: Int? = nil) throws
        -> [String]
    {
        try (0..<count).map { index in
            // With images to measure a rate by: few JSON steps, so the images are nearly all of it.
            let shape =
                imageBytes.map { SampleSession.Shape().withImages(groups: 2, perGroup: 2, bytes: $0) }
                ?? .realistic
            return try pack(SampleSession(seed: seed + UInt64(index), shape: shape), into: spool, scratch: scratch)
        }
    }

    func tlsServer(_ certificates: TestCertificates, otherHost: Bool = false, http2: Bool = false)
        -> DevServerConfiguration
    {
        var configuration = DevServerConfiguration()
        configuration.tls = DevServerTLS(
            certificateChainPath: otherHost
                ? certificates.otherHostCertificatePath : certificates.serverCertificatePath,
            privateKeyPath: otherHost ? certificates.otherHostKeyPath : certificates.serverKeyPath, http2: http2)
        return configuration
    }

    @Test("HTTPS with a private CA given by --ca-file: every bundle uploaded, over HTTP/1.1 and over h2")
    func httpsWithPrivateCA() async throws {
        try await withTemporarySpool { spool, scratch in
            let certificates = try await TestCertificates(in: scratch)
            for http2 in [false, true] {
                let names = try packBundles(3, seed: http2 ? 7_200 : 7_100, into: spool, scratch: scratch)
                try await withDevServer(tlsServer(certificates, http2: http2)) { server in
                    #expect(server.baseURL.hasPrefix("https://"))
                    let (status, output) = try await runToEnd(
                        spool, apiURL: server.baseURL, token: server.token,
                        ["--ca-file", certificates.caCertificatePath])
                    #expect(status == 0, "\(output)")
                    #expect(Set(try await spool.list(.done).map(\.name)).isSuperset(of: names))
                    #expect(try await server.createdCounts()["session"] == 3)
                }
            }
        }
    }

    @Test(
        "https:// to a plain-HTTP port and http:// to a TLS port: exit 78 with the right words, no attempt counted, nothing sent"
    )
    func mixedUpSchemesAreNamed() async throws {
        try await withTemporarySpool { spool, scratch in
            let certificates = try await TestCertificates(in: scratch)
            let names = try packBundles(2, seed: 7_350, into: spool, scratch: scratch)
            try await withDevServer { plain in
                let tlsToPlain = plain.baseURL.replacingOccurrences(of: "http://", with: "https://")
                let (status, output) = try await runToEnd(spool, apiURL: tlsToPlain, token: plain.token)
                #expect(status == 78, "\(output)")
                #expect(output.contains("the server speaks plain HTTP: use http://"), "\(output)")
            }
            try await withDevServer(tlsServer(certificates)) { tls in
                let plainToTLS = tls.baseURL.replacingOccurrences(of: "https://", with: "http://")
                let (status, output) = try await runToEnd(spool, apiURL: plainToTLS, token: tls.token)
                #expect(status == 78, "\(output)")
                #expect(output.contains("the server speaks TLS: use https://"), "\(output)")
            }
            #expect(Set(try await spool.list(.incoming).map(\.name)) == Set(names))
            let store = try CheckpointStore(spool: spool)
            for name in names { #expect(try store.bundleState(name: name)?.attempts ?? 0 == 0) }
        }
    }

    @Test(
        "http:// to a TLS server slow to answer a handshake (4 s, as on a loaded machine): still exit 78, named"
    )
    func mixedUpSchemeNamedWhenTheHandshakeIsSlow() async throws {
        try await withTemporarySpool { spool, scratch in
            let certificates = try await TestCertificates(in: scratch)
            let names = try packBundles(1, seed: 7_360, into: spool, scratch: scratch)
            try await withDevServer(tlsServer(certificates)) { tls in
                try await SlowHandshakeRelay.with(to: tls.port, handshakeDelay: .seconds(4)) { relay in
                    let (status, output) = try await runToEnd(
                        spool, apiURL: "http://127.0.0.1:\(relay.port)", token: tls.token)
                    #expect(status == 78, "\(output)")
                    #expect(output.contains("the server speaks TLS: use https://"), "\(output)")
                }
            }
            #expect(try await spool.list(.incoming).map(\.name) == names)
        }
    }

    @Test(
        "a plain server that hangs up once costs no probe wait: asked for TLS, it refuses at once; asked for plain HTTP, it answers"
    )
    func aPlainServerRefusesTheTLSProbeAtOnce() async throws {
        try await withDevServer { plain in
            let probe = SchemeProbe()
            let started = ContinuousClock.now
            #expect(await !probe.speaks(.https, host: "127.0.0.1", port: plain.port))
            // A refused handshake is an answer: not the pool's retries until the 15 s budget.
            #expect(ContinuousClock.now - started < .seconds(5), "\(ContinuousClock.now - started)")
            #expect(await !probe.speaks(.https, host: "127.0.0.1", port: plain.port))
            #expect(await probe.speaks(.http, host: "127.0.0.1", port: plain.port))
        }
    }

    @Test(
        "a scheme probe's three answers: yes from a server that speaks it, no from one reached that refuses it, none (asked again later) from a port that refuses connections"
    )
    func aSchemeProbeTellsRefusedFromUnreached() async throws {
        try await withTemporaryDirectory { scratch in
            let certificates = try await TestCertificates(in: scratch)
            try await withDevServer(tlsServer(certificates)) { tls in
                #expect(await SchemeProbe.ask(.https, host: "127.0.0.1", port: tls.port) == true)
                #expect(await SchemeProbe.ask(.http, host: "127.0.0.1", port: tls.port) == false)
            }
            try await withRefusingPort { url in
                let port = try #require(URL(string: url)?.port)
                // Not reached at all (a server restarting): no answer, so not kept as "no".
                #expect(await SchemeProbe.ask(.https, host: "127.0.0.1", port: port) == nil)
            }
        }
    }

    @Test(
        "HTTPS with a certificate nobody vouched for: exit 76 at once, a message naming the cause, bundles back in incoming/ uncounted"
    )
    func untrustedCertificateStopsTheRun() async throws {
        try await withTemporarySpool { spool, scratch in
            let certificates = try await TestCertificates(in: scratch)
            let names = try packBundles(3, seed: 7_300, into: spool, scratch: scratch)
            try await withDevServer(tlsServer(certificates)) { server in
                let (status, output) = try await runToEnd(spool, apiURL: server.baseURL, token: server.token)
                #expect(status == 76, "\(output)")
                #expect(output.contains("TLS certificate cannot be trusted"), "\(output)")
                #expect(output.contains("--ca-file"), "the message says what to do: \(output)")
                #expect(Set(try await spool.list(.incoming).map(\.name)) == Set(names))
                #expect(try await spool.list(.failed).isEmpty)
                #expect(try await spool.list(.processing).isEmpty)
                let store = try CheckpointStore(spool: spool)
                for name in names { #expect(try store.bundleState(name: name)?.attempts ?? 0 == 0) }
                #expect(try await server.createdCounts()["session", default: 0] == 0)
            }
        }
    }

    @Test("A certificate from the trusted CA but for another host name: exit 76, the message says so")
    func wrongHostNameStopsTheRun() async throws {
        try await withTemporarySpool { spool, scratch in
            let certificates = try await TestCertificates(in: scratch)
            try packBundles(1, seed: 7_400, into: spool, scratch: scratch)
            try await withDevServer(tlsServer(certificates, otherHost: true)) { server in
                let (status, output) = try await runToEnd(
                    spool, apiURL: server.baseURL, token: server.token, ["--ca-file", certificates.caCertificatePath])
                #expect(status == 76, "\(output)")
                #expect(output.contains("TLS certificate cannot be trusted"), "\(output)")
                #expect(try await spool.list(.incoming).count == 1)
            }
        }
    }

    @Test("A --ca-file that holds no certificate is a configuration error naming the file (exit 78)")
    func caFileWithoutCertificate() async throws {
        try await withTemporarySpool { spool, scratch in
            let notPEM = scratch.appendingPathComponent("not-a-ca.pem")
            try Data("hello\n".utf8).write(to: notPEM)
            let (status, output) = try await runToEnd(
                spool, apiURL: "https://127.0.0.1:9", token: "t", ["--ca-file", notPEM.path])
            #expect(status == 78)
            #expect(output.contains(notPEM.path) && output.contains("[unreadable_ca_file]"), "\(output)")
        }
    }

    @Test("http_proxy: every request goes through the proxy, which counts exactly the requests the server saw")
    func runThroughProxy() async throws {
        try await withTemporarySpool { spool, scratch in
            try packBundles(3, seed: 7_500, into: spool, scratch: scratch)
            try await withDevServer { server in
                try await CountingProxy.with { proxy in
                    let (status, output) = try await runToEnd(
                        spool, apiURL: server.baseURL, token: server.token, environment: ["http_proxy": proxy.url])
                    #expect(status == 0, "\(output)")
                    #expect(try await spool.list(.done).count == 3)
                    let counts = proxy.snapshot
                    let seen = try await server.requestLog()
                    #expect(counts.tunnels >= 1)
                    #expect(counts.requests.values.reduce(0, +) == seen.count, "\(counts.requests)")
                    #expect(counts.requests["POST"] == seen.filter { $0.method == "POST" }.count)
                    #expect(counts.targets.allSatisfy { $0 == "127.0.0.1:\(server.port)" })
                }
            }
        }
    }

    @Test(
        "HTTPS through the proxy (CONNECT): uploaded, the proxy sees only tunnels to the API; with h2 offered, one connection carries every request",
        arguments: [false, true])
    func httpsThroughProxy(http2: Bool) async throws {
        try await withTemporarySpool { spool, scratch in
            let certificates = try await TestCertificates(in: scratch)
            try packBundles(4, seed: http2 ? 7_650 : 7_600, into: spool, scratch: scratch)
            try await withDevServer(tlsServer(certificates, http2: http2)) { server in
                try await CountingProxy.with { proxy in
                    let (status, output) = try await runToEnd(
                        spool, apiURL: server.baseURL, token: server.token,
                        ["--ca-file", certificates.caCertificatePath, "--concurrency", "4"],
                        environment: ["HTTPS_PROXY": proxy.url])
                    #expect(status == 0, "\(output)")
                    #expect(try await spool.list(.done).count == 4)
                    let counts = proxy.snapshot
                    #expect(counts.tunnels >= 1 && counts.bytesFromClient > 0)
                    #expect(counts.requests.isEmpty, "TLS inside the tunnel: nothing readable")
                    #expect(counts.targets.allSatisfy { $0 == "127.0.0.1:\(server.port)" })
                    // h2 multiplexes the four bundles' requests on one connection; HTTP/1.1 needs
                    // one connection per request in flight (4 here). Under load AsyncHTTPClient may
                    // open a second before the first's ALPN answer says h2 (seen in `make test`).
                    if http2 { #expect(counts.tunnels <= 2, "AsyncHTTPClient took h2: \(counts.tunnels) connections") }
                }
            }
        }
    }

    @Test("NO_PROXY naming the API's host: the run goes straight to it, the proxy sees nothing")
    func noProxyBypassesTheProxy() async throws {
        try await withTemporarySpool { spool, scratch in
            try packBundles(2, seed: 7_700, into: spool, scratch: scratch)
            try await withDevServer { server in
                try await CountingProxy.with { proxy in
                    let (status, output) = try await runToEnd(
                        spool, apiURL: server.baseURL, token: server.token,
                        environment: ["http_proxy": proxy.url, "NO_PROXY": "localhost,127.0.0.1"])
                    #expect(status == 0, "\(output)")
                    #expect(try await spool.list(.done).count == 2)
                    #expect(proxy.snapshot.tunnels == 0 && proxy.snapshot.bytesFromClient == 0)
                }
            }
        }
    }

    @Test(
        "Proxy credentials in --proxy are sent to the proxy and never printed; without them, a 407 said plainly (exit 77)"
    )
    func proxyCredentials() async throws {
        try await withTemporarySpool { spool, scratch in
            try packBundles(1, seed: 7_800, into: spool, scratch: scratch)
            try await withDevServer { server in
                try await CountingProxy.with(credentials: "ops:s3cret-proxy-word") { proxy in
                    let (refusedStatus, refusedOutput) = try await runToEnd(
                        spool, apiURL: server.baseURL, token: server.token, ["--proxy", proxy.url])
                    #expect(refusedStatus == 77, "credentials refused, as the API's would be: \(refusedOutput)")
                    #expect(refusedOutput.contains("asks for credentials (407)"), "\(refusedOutput)")
                    #expect(try await spool.list(.incoming).count == 1, "given back")

                    let withCredentials = "http://ops:s3cret-proxy-word@127.0.0.1:\(proxy.port)"
                    let (status, output) = try await runToEnd(
                        spool, apiURL: server.baseURL, token: server.token, ["--proxy", withCredentials])
                    #expect(status == 0, "\(output)")
                    #expect(try await spool.list(.done).count == 1)
                    #expect(!output.contains("s3cret"), "\(output)")
                    #expect(output.contains("http://***@127.0.0.1:\(proxy.port)"), "the log names the proxy: \(output)")
                }
            }
        }
    }

    @Test(
        "--max-rate 1MiB/s over about 4 MiB of images: the rate the proxy measures is at most 15% over the cap, and not far under it"
    )
    func maxRateHoldsTheCap() async throws {
        try await withTemporarySpool { spool, scratch in
            // 4 bundles × 4 images × 256 KiB, uploaded 4 at once: the cap is shared, not per bundle.
            try packBundles(4, seed: 7_900, into: spool, scratch: scratch, imageBytes: 256 * 1024)
            try await withDevServer { server in
                try await CountingProxy.with { proxy in
                    let cap = 1024.0 * 1024
                    let (status, output) = try await runToEnd(
                        spool, apiURL: server.baseURL, token: server.token,
                        ["--max-rate", "1MiB/s", "--concurrency", "4"], environment: ["http_proxy": proxy.url])
                    #expect(status == 0, "\(output)")
                    // The sustained rate: from the moment a tenth of the bytes had passed to the moment
                    // nine tenths had, past the first JSON steps and before the last answers.
                    let rate = try #require(proxy.rate(from: 0.1, to: 0.9))
                    #expect(proxy.snapshot.bytesFromClient > 4_000_000)
                    // Over the cap is the failure this guards against; under it, only a slow machine:
                    // alone the rate is within a few percent, with the whole suite sharing two cores
                    // once 40% under.
                    #expect(rate <= cap * 1.15, "measured \(Int(rate)) B/s against a cap of \(Int(cap))")
                    #expect(rate >= cap * 0.5, "measured \(Int(rate)) B/s against a cap of \(Int(cap))")
                    #expect(output.contains(" sent at "), "the summary shows the rate achieved: \(output)")
                }
            }
        }
    }
}
