import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

/// A request still in flight when the grace after a stop request ran out: cancelled.
struct StoppedInFlight: Error {
    let grace: Duration
}

/// Requests that got no answer: what the error was, in words for the log and the sidecar, and
/// what it means for the step.
extension APIClient {
    /// A request that got no answer, by the error's type (AsyncHTTPClient's, NIO's, NIOSSL's),
    /// never by its text: a certificate that cannot be trusted, or a proxy that wants
    /// credentials, stops the run; anything else is an outage to retry, in words for the log and
    /// `failed/NAME.error`.
    func classify(_ error: any Error) async -> StepResponse {
        // A scheme that is not the server's is the URL's fault: no attempt counted, no retry.
        if "\(error)".contains("WRONG_VERSION_NUMBER") {
            return .misdirected(
                message: "TLS to \(MaskedURL.string(baseURL)) got an answer that is not TLS: the server speaks plain "
                    + "HTTP: use http://")
        }
        if Self.isHangUp(error), await urlNamesTheOtherScheme(than: .http) {
            // A plain server may hang up on a TLS hello before its "400" reaches us.
            return .misdirected(
                message: "TLS to \(MaskedURL.string(baseURL)) was hung up on, and the server answers plain HTTP there: "
                    + "the server speaks plain HTTP: use http://")
        }
        if let error = error as? HTTPClientError, error == .remoteConnectionClosed,
            await urlNamesTheOtherScheme(than: .https)
        {
            return .misdirected(
                message: "plain HTTP to \(MaskedURL.string(baseURL)) was hung up on, and the server answers TLS there: "
                    + "the server speaks TLS: use https://")
        }
        if let reason = Self.trustFailure(error) {
            return .notTrusted(message: "the API's TLS certificate cannot be trusted: \(reason)")
        }
        // The proxy refused the credentials: like the API refusing them, no retry can help.
        if let error = error as? HTTPClientError, error == .proxyAuthenticationRequired {
            return .unauthorized(status: 407, message: describe(error))
        }
        return .retryable(status: nil, retryAfter: nil, message: describe(error))
    }

    /// Whether the API's URL names the other scheme than `spoken`, which its server speaks (asked
    /// once, directly: not through a proxy, whose hang-ups say nothing of the server). Once a stop
    /// is asked for, the run ends whatever the answer: no probe starts (one already under way may
    /// take its budget).
    private func urlNamesTheOtherScheme(than spoken: SchemeProbe.Scheme) async -> Bool {
        let named: SchemeProbe.Scheme = spoken == .https ? .http : .https
        guard proxy == nil, !stop.isRequested, let url = URL(string: baseURL),
            url.scheme?.lowercased() == named.rawValue, let host = url.host
        else { return false }
        return await schemeProbe.speaks(spoken, host: host, port: url.port ?? (named == .http ? 80 : 443))
    }

    /// The server hung up before an answer (or a TLS handshake) was complete.
    private static func isHangUp(_ error: any Error) -> Bool {
        if let error = error as? HTTPClientError { return error == .remoteConnectionClosed }
        if let error = error as? NIOSSLError, case .uncleanShutdown = error { return true }
        return false
    }

    /// Why TLS with the API failed, if that is what `error` is.
    static func trustFailure(_ error: any Error) -> String? {
        switch error {
        case let error as NIOSSLExtraError where error == .failedToValidateHostname:
            return "it is not issued for this host name (\(error))"
        case NIOSSLError.handshakeFailed(let reason):
            return "the TLS handshake failed (\(reason)); an unknown CA needs --ca-file"
        case let error as NIOConnectionError:
            return error.connectionErrors.lazy.compactMap { trustFailure($0.error) }.first
        default:
            return nil
        }
    }

    func describe(_ error: any Error) -> String {
        // An error's text may quote a header: never the token.
        let token = credential.current
        func redacted(_ text: String) -> String {
            guard !token.isEmpty else { return text }
            let header = text.replacingOccurrences(of: "Bearer \(token)", with: "Bearer <token>")
            // A token too short to be anything but a test's would match ordinary words.
            return token.count >= 8 ? header.replacingOccurrences(of: token, with: "<token>") : header
        }
        return redacted(describeUnredacted(error))
    }

    private func describeUnredacted(_ error: any Error) -> String {
        switch error {
        case let stopped as StoppedInFlight:
            return
                "the run was asked to stop, and the request was cancelled after \(stopped.grace / .milliseconds(1) / 1000) s "
                + "of grace (its outcome is looked up next run)"
        case let error as HTTPClientError:
            switch error {
            case .deadlineExceeded, .readTimeout, .writeTimeout, .connectTimeout: return "timed out"
            case .remoteConnectionClosed: return "the server closed the connection without an answer"
            case .proxyAuthenticationRequired:
                return "the proxy \(proxy.map(String.init(describing:)) ?? "") asks for credentials (407): "
                    + "give them in the proxy's URL, http://user:password@host:port"
            case .invalidProxyResponse:
                return "the proxy \(proxy.map(String.init(describing:)) ?? "") refused to connect to the API"
            default: return "\(error)"
            }
        case let error as NIOConnectionError:
            // Every address tried failed; one refusal is enough to say nothing listens there.
            let refused = error.connectionErrors.contains { ($0.error as? IOError)?.errnoCode == ECONNREFUSED }
            return refused ? refusedMessage : "\(error)"
        case let error as IOError where error.errnoCode == ECONNREFUSED:
            return refusedMessage
        case ChannelError.connectTimeout:
            return "timed out"
        default:
            return "\(error)"
        }
    }

    /// With a proxy, connections go to the proxy only: a refusal is the proxy's.
    private var refusedMessage: String {
        proxy.map { "connection refused by the proxy \($0) (is it up?)" } ?? "connection refused (is the API up?)"
    }
}

/// Whether a server speaks the other scheme than its URL's, for a URL whose server hangs up
/// without an answer (a TLS server does that to plain HTTP, and a plain one, often, to a TLS
/// hello). One request, any certificate taken, asked once per client and scheme: the answer is
/// the same for every request, and requests that hang up together wait for the same probe.
///
/// The probe connects once, without the pool's retries: a handshake the server refuses is a
/// "no" at once, remembered (retried until the deadline, it cost every hang-up of a plain server
/// the whole budget). A probe that got no connection, or no answer in time, is not remembered:
/// on a loaded machine a handshake can take seconds, a server may be restarting, and "no" would
/// then name a misconfigured URL an outage (exit 75, not 78) for the rest of the run; the next
/// hang-up asks again.
final class SchemeProbe: Sendable {
    enum Scheme: String, Sendable {
        case http, https
    }
    /// How long the probe waits for its answer. It runs only after a hang-up, and only until the
    /// first answer, so a long budget costs a healthy run nothing.
    static let budget: TimeAmount = .seconds(15)
    private let probes = Mutex<[Scheme: Task<Bool?, Never>]>([:])

    func speaks(_ scheme: Scheme, host: String, port: Int) async -> Bool {
        let probe = probes.withLock { probes in
            if let probe = probes[scheme] { return probe }
            let probe = Task { await Self.ask(scheme, host: host, port: port) }
            probes[scheme] = probe
            return probe
        }
        guard let spoken = await probe.value else {
            // No answer in time: the next hang-up asks again.
            probes.withLock { if $0[scheme] == probe { $0[scheme] = nil } }
            return false
        }
        return spoken
    }

    /// True: the server answered in `scheme`; false: it refused it; nil: no answer in time.
    static func ask(_ scheme: Scheme, host: String, port: Int) async -> Bool? {
        var configuration = HTTPClient.Configuration()
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .none  // only whether TLS is spoken; nothing is sent
        configuration.tlsConfiguration = tls
        configuration.timeout = .init(connect: budget, read: budget)
        configuration.connectionPool.retryConnectionEstablishment = false
        let bracketed = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        do {
            return try await HTTPClient.withHTTPClient(configuration: configuration) { http in
                var request = HTTPClientRequest(url: "\(scheme.rawValue)://\(bracketed):\(port)/api/health")
                request.method = .GET
                let response = try await http.execute(request, timeout: budget)
                _ = try? await response.body.collect(upTo: 1 << 16)
                return true
            }
        } catch let error as HTTPClientError
            where [
                .deadlineExceeded, .readTimeout, .connectTimeout, .tlsHandshakeTimeout, .getConnectionFromPoolTimeout,
            ]
            .contains(error)
        {
            return nil
        } catch is NIOConnectionError {
            return nil  // not connected at all (refused while the server restarts, a name not found)
        } catch let error as IOError where [ECONNREFUSED, ECONNRESET, EPIPE].contains(error.errnoCode) {
            return nil  // cut, not answered: asked again (at once) next time
        } catch {
            return false  // connected, and the other scheme refused: a handshake failed, a hang-up
        }
    }
}
