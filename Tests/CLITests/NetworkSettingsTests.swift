import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync

/// How `run` decides its proxy, reads a rate cap and spaces out a capped upload: the rules an
/// operator relies on, without a network.
@Suite struct NetworkSettingsTests {
    func resolve(
        api: String = "https://api.example.com", commandLine: [RunSetting: String] = [:],
        environment: [String: String] = [:], jobFile: String? = nil
    ) throws(ConfigurationError) -> RunConfiguration {
        var options = commandLine
        options[.api] = api
        return try RunConfiguration.resolve(
            commandLine: options, environment: environment.merging(["DOPESYNC_API_TOKEN": "t"]) { $1 },
            jobFile: jobFile)
    }

    @Test("https_proxy serves an https API, http_proxy an http one, lower case before upper, as curl does")
    func proxyFromTheEnvironment() throws {
        let environment = [
            "https_proxy": "http://secure-proxy:3128", "HTTPS_PROXY": "http://upper:1",
            "http_proxy": "plain-proxy:8080",
        ]
        let https = try resolve(environment: environment)
        #expect(https.proxy == .through(HTTPProxy(host: "secure-proxy", port: 3128)))
        #expect(https.sources["proxy"] == .environment(variable: "https_proxy"))
        let http = try resolve(
            api: "http://api.example.com", commandLine: [.allowInsecureHTTP: "true"], environment: environment)
        #expect(http.proxy == .through(HTTPProxy(host: "plain-proxy", port: 8080)))
        #expect(try resolve(environment: ["ALL_PROXY": "http://all:9"]).proxy.proxy?.host == "all")
        #expect(try resolve().proxy == .direct)
    }

    @Test(
        "a loopback http API through a proxy on another machine needs allow-insecure-http, whether the proxy is set or from http_proxy; a loopback proxy does not"
    )
    func plainHTTPThroughARemoteProxyIsRefused() throws {
        let api = "http://127.0.0.1:8080"
        for (commandLine, environment) in [
            ([RunSetting.proxy: "http://10.213.0.2:3128"], [String: String]()),
            ([:], ["http_proxy": "http://ops:pw@10.213.0.2:3128"]),
        ] {
            do {
                _ = try resolve(api: api, commandLine: commandLine, environment: environment)
                Issue.record("the token would go in clear to 10.213.0.2")
            } catch {
                #expect(error.code == .insecureAPI, "\(error)")
                #expect(error.message.contains("through the proxy http://"), "\(error.message)")
                #expect(error.message.contains("10.213.0.2") && !error.message.contains(":pw@"), "\(error.message)")
                #expect(error.message.contains("allow-insecure-http"), "\(error.message)")
            }
        }
        let allowed = try resolve(
            api: api, commandLine: [.proxy: "http://10.213.0.2:3128", .allowInsecureHTTP: "true"])
        #expect(allowed.warnings.contains { $0.contains("travel in clear to the proxy") }, "\(allowed.warnings)")
        #expect(try resolve(api: api, commandLine: [.proxy: "http://127.0.0.1:3128"]).proxy.proxy?.port == 3128)
    }

    @Test("The proxy setting (command line or job file) wins over the environment; `none` means direct")
    func proxySettingWins() async throws {
        let environment = ["https_proxy": "http://from-env:3128"]
        let typed = try resolve(commandLine: [.proxy: "http://typed:1234"], environment: environment)
        #expect(typed.proxy.proxy?.host == "typed")
        #expect(try resolve(commandLine: [.proxy: "none"], environment: environment).proxy == .direct)
        try await withTemporaryDirectory { folder in
            let job = folder.appendingPathComponent("job.yaml")
            try Data("proxy: http://from-job:8000\nmax-rate: 2MB/s\n".utf8).write(to: job)
            let settings = try resolve(environment: environment, jobFile: job.path)
            #expect(settings.proxy.proxy?.host == "from-job")
            #expect(settings.maxRate == 2_000_000)
            #expect(settings.sources["proxy"] == .jobFile(path: job.path, line: 1))
        }
    }

    @Test("NO_PROXY: names match themselves and their subdomains, IPs and CIDR ranges match addresses, * all")
    func noProxy() throws {
        let list = NoProxyList(" .internal.example, api.local:443, 10.0.0.0/8, 192.168.1.7, [::1] ")
        #expect(list.bypasses(host: "internal.example"))
        #expect(list.bypasses(host: "svc.internal.example"))
        #expect(!list.bypasses(host: "notinternal.example"))
        #expect(list.bypasses(host: "API.local"))
        #expect(list.bypasses(host: "10.20.30.40"))
        #expect(!list.bypasses(host: "11.0.0.1"))
        #expect(list.bypasses(host: "192.168.1.7"))
        #expect(list.bypasses(host: "[::1]"))
        #expect(NoProxyList("*").bypasses(host: "anything.example"))
        #expect(!NoProxyList("").bypasses(host: "anything.example"))
        let bypassed = try resolve(environment: ["https_proxy": "http://p:1", "no_proxy": "example.com"])
        #expect(bypassed.proxy == .direct)
    }

    @Test("Proxy credentials are used but never shown: not in the settings line, not in an error")
    func proxyCredentialsNeverShown() throws {
        let proxy = try #require(HTTPProxy.parse("http://ops:p%40ss@proxy.example:3128/"))
        #expect(proxy.username == "ops" && proxy.password == "p@ss")
        #expect("\(proxy)" == "http://***@proxy.example:3128")
        let settings = try resolve(commandLine: [.proxy: "http://ops:hunter2@proxy.example:3128"])
        #expect(!"\(settings)".contains("hunter2") && "\(settings)".contains("proxy=http://***@proxy.example:3128"))
        do throws(ConfigurationError) {
            _ = try resolve(commandLine: [.proxy: "https://ops:hunter2@proxy.example:3128"])
            Issue.record("an https:// proxy is refused")
        } catch {
            #expect(error.code == .badValue && error.key == "proxy")
            #expect(!"\(error)".contains("hunter2") && "\(error)".contains("only http:// proxies"), "\(error)")
        }
        #expect(HTTPProxy.parse("proxy.example")?.port == 1080, "curl's default port")
        #expect(HTTPProxy.parse("http://proxy.example:3128/some/path") == nil)
    }

    @Test("--max-rate takes KiB/MiB (1024) and kB/MB (1000), with or without /s; zero and words are refused")
    func maxRate() throws {
        #expect(ByteRate.parse("500KiB/s") == 512_000)
        #expect(ByteRate.parse("2MB/s") == 2_000_000)
        #expect(ByteRate.parse("1.5MiB") == 1_572_864)
        #expect(ByteRate.parse("800kB/s") == 800_000)
        #expect(ByteRate.parse("4096") == 4096)
        for bad in ["0", "-1MB/s", "fast", "", "1 parsec/s"] { #expect(ByteRate.parse(bad) == nil, "\(bad)") }
        #expect(throws: ConfigurationError.self) { try resolve(commandLine: [.maxRate: "lots"]) }
    }

    @Test("The rate cap: a burst of a tenth of a second goes at once, then each chunk waits for its bytes")
    func tokenBucket() {
        let limit = UploadRateLimit(bytesPerSecond: 1_000_000)
        let start = ContinuousClock.now
        #expect(limit.take(100_000, now: start) == .zero, "the burst")
        #expect(limit.take(50_000, now: start) == .milliseconds(50), "in debt: 50 ms to pay it back")
        #expect(limit.take(50_000, now: start) == .milliseconds(100), "the next one waits behind it")
        // A second later the debt is paid and the bucket refilled, but only up to the burst.
        #expect(limit.take(100_000, now: start + .seconds(2)) == .zero)
        #expect(limit.take(1, now: start + .seconds(2)) > .zero)
    }

    @Test(
        "plain http to a host that is not loopback is refused (exit 78) unless allow-insecure-http: true, which warns")
    func plainHTTPNeedsConsent() throws {
        #expect(throws: ConfigurationError.self) { try resolve(api: "http://api.example.com") }
        do {
            _ = try resolve(api: "http://ops:Secr3t@api.example.com/v1")
        } catch {
            #expect(error.code == .insecureAPI && error.exitStatus == .configuration)
            #expect("\(error)".contains("http://***@api.example.com/v1"), "\(error)")
            #expect(!"\(error)".contains("Secr3t"), "\(error)")
            #expect("\(error)".contains("allow-insecure-http: true"), "\(error)")
        }
        let allowed = try resolve(api: "http://api.example.com", commandLine: [.allowInsecureHTTP: "true"])
        #expect(allowed.warnings.contains { $0.contains("travel in clear") }, "\(allowed.warnings)")
        for loopback in ["http://127.0.0.1:8080", "http://127.9.9.9", "http://localhost:9", "http://[::1]:8080"] {
            let settings = try resolve(api: loopback)
            #expect(settings.warnings.isEmpty, "\(loopback): \(settings.warnings)")
        }
        #expect(try resolve(api: "https://api.example.com").warnings.isEmpty)
    }

    @Test("user information in the API URL is masked in the settings line and in errors")
    func apiCredentialsAreMasked() throws {
        let settings = try resolve(api: "https://apiuser:ApiPassw0rd@api.example.com")
        #expect("\(settings)".contains("api=https://***@api.example.com"), "\(settings)")
        #expect(!"\(settings)".contains("ApiPassw0rd"))
        do {
            _ = try resolve(api: "ftp://apiuser:ApiPassw0rd@api.example.com")
            Issue.record("an ftp URL was taken")
        } catch {
            #expect(!"\(error)".contains("ApiPassw0rd") && "\(error)".contains("ftp://***@api.example.com"), "\(error)")
        }
    }

    @Test("a CA file that is not there says so, naming it, not failedToLoadCertificate")
    func missingCAFileIsNamed() throws {
        do {
            _ = try resolve(commandLine: [.caFile: "/nonexistent/ca.pem"])
            Issue.record("a missing CA file was taken")
        } catch {
            #expect(error.code == .unreadableCAFile)
            #expect(
                error.message == "cannot read CA certificates from /nonexistent/ca.pem: no such file",
                "\(error.message)")
        }
    }
}
