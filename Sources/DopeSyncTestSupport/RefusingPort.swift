import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback port that refuses every connection for as long as this value lives: bound, never
/// listening. A port merely found free (a server's, just stopped) can be taken meanwhile by
/// another test's server, which then answers in its place.
public final class RefusingPort: Sendable {
    public let port: Int
    private let descriptor: Int32

    public init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EMFILE) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(descriptor, address, length) == 0 && getsockname(descriptor, address, &length) == 0
            }
        }
        guard bound else {
            let failure = POSIXError(POSIXErrorCode(rawValue: errno) ?? .EADDRINUSE)
            close(descriptor)
            throw failure
        }
        self.descriptor = descriptor
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(descriptor) }

    /// `http://127.0.0.1:PORT`.
    public var url: String { "http://127.0.0.1:\(port)" }
}

/// Runs `body` with the URL of a ``RefusingPort`` that stays bound until `body` returns: a port
/// released as soon as its URL was read could be taken by another test's server meanwhile.
public func withRefusingPort<T>(_ body: (_ url: String) async throws -> T) async throws -> T {
    let port = try RefusingPort()
    defer { withExtendedLifetime(port) {} }
    return try await body(port.url)
}
