import Foundation

/// An HTTP proxy the run reaches the API through, with CONNECT (for `https://` and `http://`
/// APIs alike, as AsyncHTTPClient does it). Credentials in its URL are kept for the proxy's
/// `Proxy-Authorization` and never printed: ``description`` shows them as `***`.
public struct HTTPProxy: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var username: String?
    public var password: String?

    public init(host: String, port: Int, username: String? = nil, password: String? = nil) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
    }

    /// `http://proxy.example:3128` or `http://***@proxy.example:3128`: never the credentials.
    public var description: String {
        let hostText = host.contains(":") ? "[\(host)]" : host
        return "http://\(username == nil ? "" : "***@")\(hostText):\(port)"
    }

    /// Parses a proxy as curl takes it: `http://[user:password@]host[:port][/]`, or the same
    /// without `http://`. Port 1080 when none is given, as curl assumes. Credentials may be
    /// percent-encoded. Returns nil for anything else (another scheme, a path, no host).
    public static func parse(_ text: String) -> HTTPProxy? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let withScheme = trimmed.contains("://") ? trimmed : "http://" + trimmed
        guard let components = URLComponents(string: withScheme), components.scheme?.lowercased() == "http",
            let host = components.host, !host.isEmpty, components.path.isEmpty || components.path == "/",
            components.query == nil, components.fragment == nil
        else { return nil }
        let port = components.port ?? 1080
        guard (1...65535).contains(port) else { return nil }
        return HTTPProxy(
            host: host, port: port, username: components.user.map { $0.removingPercentEncoding ?? $0 },
            password: components.password.map { $0.removingPercentEncoding ?? $0 })
    }
}

/// `NO_PROXY` as curl reads it: a comma-separated list of host names (each matching itself and
/// its subdomains; a leading `.` changes nothing), IP addresses, IPv4 ranges in CIDR notation,
/// or `*` for every host. A `:port` on an entry is ignored, as curl ignores it.
public struct NoProxyList: Sendable, Hashable {
    public private(set) var entries: [String]

    public init(_ text: String) {
        entries = text.split(separator: ",").compactMap { item in
            var entry = item.trimmingCharacters(in: .whitespaces).lowercased()
            if entry.hasPrefix("[") {  // [::1]:443
                entry = String(entry.dropFirst().prefix { $0 != "]" })
            } else if entry.filter({ $0 == ":" }).count == 1 {
                entry = String(entry.prefix { $0 != ":" })
            }
            while entry.hasPrefix(".") { entry.removeFirst() }
            return entry.isEmpty ? nil : entry
        }
    }

    /// Whether a request to `host` goes straight to it, not through the proxy.
    public func bypasses(host: String) -> Bool {
        var host = host.lowercased()
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return entries.contains { entry in
            if entry == "*" || entry == host { return true }
            if let range = IPv4Range(entry) { return IPv4Range.address(host).map(range.contains) ?? false }
            return host.hasSuffix("." + entry)
        }
    }

    /// `10.0.0.0/8`: the only kind of range NO_PROXY entries hold in practice.
    private struct IPv4Range {
        let network: UInt32
        let mask: UInt32

        init?(_ text: String) {
            let parts = text.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count == 2, let address = Self.address(String(parts[0])), let bits = Int(parts[1]),
                (0...32).contains(bits)
            else { return nil }
            mask = bits == 0 ? 0 : UInt32.max << UInt32(32 - bits)
            network = address & mask
        }

        func contains(_ address: UInt32) -> Bool { address & mask == network }

        static func address(_ text: String) -> UInt32? {
            let octets = text.split(separator: ".", omittingEmptySubsequences: false)
            guard octets.count == 4 else { return nil }
            var value: UInt32 = 0
            for octet in octets {
                guard let byte = UInt8(octet) else { return nil }
                value = value << 8 | UInt32(byte)
            }
            return value
        }
    }
}

/// Which proxy, if any, a run uses for its API, from (highest first) the `proxy` setting
/// (command line, `DOPESYNC_PROXY`, job file: a URL, or `none` for a direct connection), then
/// the variables curl reads: `https_proxy`/`HTTPS_PROXY` for an `https://` API,
/// `http_proxy`/`HTTP_PROXY` for `http://`, then `all_proxy`/`ALL_PROXY`. `no_proxy`/`NO_PROXY`
/// sends hosts it names straight to them, whichever way the proxy was given.
public enum ProxyChoice: Sendable, Hashable, CustomStringConvertible {
    case direct
    case through(HTTPProxy)

    public var proxy: HTTPProxy? {
        if case .through(let proxy) = self { proxy } else { nil }
    }

    public var description: String {
        switch self {
        case .direct: "none"
        case .through(let proxy): "\(proxy)"
        }
    }

    /// The word for a direct connection in the `proxy` setting (an empty value means the same).
    public static let directKeyword = "none"

    /// Decides the proxy for `apiURL`. `setting` is the `proxy` setting's value and where it
    /// came from, if it was given. The returned source says where the proxy came from (nil for
    /// no proxy at all).
    static func resolve(
        apiURL: String, setting: (text: String, source: SettingSource)?, environment: [String: String]
    ) throws(ConfigurationError) -> (choice: ProxyChoice, source: SettingSource?) {
        guard let url = URL(string: apiURL), let host = url.host else { return (.direct, nil) }
        let noProxy = NoProxyList(Self.variable(["no_proxy", "NO_PROXY"], in: environment)?.value ?? "")
        if noProxy.bypasses(host: host) { return (.direct, nil) }

        if let (text, source) = setting {
            let trimmed = text.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.lowercased() == directKeyword { return (.direct, source) }
            return (.through(try parse(trimmed, key: RunSetting.proxy.key, source: source)), source)
        }
        let names =
            url.scheme?.lowercased() == "https"
            ? ["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
            : ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
        guard let (name, value) = variable(names, in: environment) else { return (.direct, nil) }
        let source = SettingSource.environment(variable: name)
        return (.through(try parse(value, key: RunSetting.proxy.key, source: source)), source)
    }

    /// The first of `names` set to something other than blanks.
    private static func variable(_ names: [String], in environment: [String: String]) -> (
        name: String, value: String
    )? {
        for name in names {
            if let value = environment[name], !value.trimmingCharacters(in: .whitespaces).isEmpty {
                return (name, value)
            }
        }
        return nil
    }

    /// A proxy URL, or an error that shows it without its credentials.
    private static func parse(_ text: String, key: String, source: SettingSource) throws(ConfigurationError)
        -> HTTPProxy
    {
        if let proxy = HTTPProxy.parse(text) { return proxy }
        // The text may hold a password: show only what comes after the last "@".
        let shown = text.contains("@") ? "***@" + (text.split(separator: "@").last.map(String.init) ?? "") : text
        let scheme = text.contains("://") ? String(text.prefix { $0 != ":" }).lowercased() : "http"
        let why =
            scheme == "http"
            ? "is not a proxy URL http://[user:password@]host[:port]"
            : "uses \(scheme)://, but only http:// proxies are supported (HTTPS is tunnelled through them with CONNECT)"
        throw ConfigurationError(.badValue, key: key, source: source, message: "\"\(shown)\" \(why)")
    }
}
