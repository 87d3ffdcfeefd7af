import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport
import Foundation

/// Where the shared checkpoint database is (`database:`, `--database`, `DOPESYNC_DATABASE_URL`):
/// `postgresql://USER@HOST:PORT/DATABASE`, with an optional `?sslmode=`. The password is never part
/// of it: it comes from `database-password-file:` or `DOPESYNC_DATABASE_PASSWORD`.
public struct DatabaseSettings: Sendable, Equatable {
    public enum TLSMode: String, Sendable {
        /// Plain TCP (a database on loopback or a private network).
        case disable
        /// TLS when the server offers it, plain otherwise (libpq's default).
        case prefer
        /// TLS with the server's certificate verified against the system's roots and its host name.
        case verifyFull = "verify-full"
    }

    public var host: String
    public var port: Int
    public var user: String
    public var database: String
    public var tls: TLSMode
    /// Never printed: ``description`` and ``url`` leave it out.
    public var password: String?
    /// How long a claim lasts without renewal (`lease:`).
    public var lease: Duration

    public init(
        host: String, port: Int = 5432, user: String, database: String, tls: TLSMode = .prefer,
        password: String? = nil, lease: Duration = .seconds(30)
    ) {
        self.host = host
        self.port = port
        self.user = user
        self.database = database
        self.tls = tls
        self.password = password
        self.lease = lease
    }

    /// The URL without the password: for logs, `status` and error messages.
    public var url: String {
        let host = self.host.contains(":") ? "[\(self.host)]" : self.host
        let query = tls == .prefer ? "" : "?sslmode=\(tls.rawValue)"
        return "postgresql://\(user)@\(host):\(port)/\(database)\(query)"
    }

    /// Why a URL is not one this worker can use, naming the part at fault.
    public struct URLProblem: Error, Equatable, CustomStringConvertible {
        public let description: String
    }

    /// Parses `postgresql://USER@HOST[:PORT]/DATABASE[?sslmode=disable|prefer|verify-full]`
    /// (`postgres://` too). A password in it is refused: a URL ends up in job files, process
    /// lists and logs.
    public static func parse(_ text: String) -> Result<DatabaseSettings, URLProblem> {
        guard let components = URLComponents(string: text),
            let scheme = components.scheme?.lowercased(), scheme == "postgresql" || scheme == "postgres"
        else {
            return .failure(URLProblem(description: "not a postgresql:// URL (postgresql://USER@HOST:PORT/DATABASE)"))
        }
        guard components.password == nil else {
            return .failure(
                URLProblem(
                    description:
                        "the URL holds a password; put it in the file named by database-password-file: or in DOPESYNC_DATABASE_PASSWORD"
                ))
        }
        guard let user = components.user, !user.isEmpty else {
            return .failure(URLProblem(description: "the URL names no user (postgresql://USER@HOST/DATABASE)"))
        }
        guard let host = components.host, !host.isEmpty else {
            return .failure(URLProblem(description: "the URL names no host"))
        }
        let database = String(components.path.drop(while: { $0 == "/" }))
        guard !database.isEmpty, !database.contains("/") else {
            return .failure(URLProblem(description: "the URL names no database (postgresql://USER@HOST/DATABASE)"))
        }
        var tls = TLSMode.prefer
        for item in components.queryItems ?? [] {
            guard item.name == "sslmode" else {
                return .failure(URLProblem(description: "unknown URL parameter \"\(item.name)\" (only sslmode)"))
            }
            guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                return .failure(
                    URLProblem(
                        description:
                            "sslmode \"\(item.value ?? "")\" is none of disable, prefer, verify-full"))
            }
            tls = mode
        }
        let unbracketed = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return .success(
            DatabaseSettings(
                host: unbracketed, port: components.port ?? 5432, user: user.removingPercentEncoding ?? user,
                database: database.removingPercentEncoding ?? database, tls: tls))
    }
}
