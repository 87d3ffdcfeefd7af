import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// An HTTP proxy on loopback that takes `CONNECT host:port` (as AsyncHTTPClient sends for every
/// proxied connection), tunnels the bytes both ways, and counts what passes: tunnels, bytes
/// from the client with the time of the first and the last, and, for plain-HTTP traffic in a
/// tunnel, the requests in it (read from their framing: head, then `Content-Length` bytes).
public final class CountingProxy: Sendable {
    public struct Counts: Sendable {
        /// CONNECT requests answered 200.
        public var tunnels = 0
        /// CONNECT requests refused (407 for missing credentials, 502 for an unreachable target).
        public var refused = 0
        /// Bytes the client sent into tunnels.
        public var bytesFromClient: Int64 = 0
        /// HTTP requests seen inside tunnels (plain HTTP only; TLS hides them), by method, counted
        /// at their heads.
        public var requests: [String: Int] = [:]
        /// Those of them whose whole body (`Content-Length` bytes) passed too: what the server got whole.
        public var wholeRequests: [String: Int] = [:]
        /// When each read from a client arrived, and the bytes from clients so far then.
        public var progress: [(at: ContinuousClock.Instant, bytes: Int64)] = []
        /// What CONNECT asked for, in order (`127.0.0.1:8443`).
        public var targets: [String] = []
    }

    public let port: Int
    private let counter: ProxyCounter

    private init(port: Int, counter: ProxyCounter) {
        self.port = port
        self.counter = counter
    }

    public var snapshot: Counts { counter.counts.withLock { $0 } }

    /// Bytes per second from clients between the moments `from` and `to` of the bytes had
    /// passed (fractions of the total): the sustained rate, without the start and the end.
    public func rate(from: Double, to: Double) -> Double? {
        let progress = snapshot.progress
        guard let total = progress.last?.bytes, total > 0,
            let start = progress.first(where: { Double($0.bytes) >= from * Double(total) }),
            let end = progress.first(where: { Double($0.bytes) >= to * Double(total) }), end.at > start.at
        else { return nil }
        return Double(end.bytes - start.bytes) / ((end.at - start.at) / .seconds(1))
    }

    /// `http://127.0.0.1:PORT`, as `https_proxy` or `--proxy` takes it.
    public var url: String { "http://127.0.0.1:\(port)" }

    /// Runs a proxy on a free loopback port for the length of `body`.
    public static func with<T>(
        credentials: String? = nil, _ body: (CountingProxy) async throws -> T
    ) async throws -> T {
        let counter = ProxyCounter()
        let authorization = credentials.map(basicAuthorization)
        return try await withLoopbackListener(
            handler: { ConnectHandler(proxy: counter, expectedAuthorization: authorization) },
            body: { try await body(CountingProxy(port: $0, counter: counter)) })
    }
}

/// Listens on a free loopback port for the length of `body`, each connection starting with the
/// handler `makeHandler` makes; `body` gets the port.
private func withLoopbackListener<T>(
    handler makeHandler: @escaping @Sendable () -> any ChannelHandler, body: (Int) async throws -> T
) async throws -> T {
    let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        .childChannelInitializer { channel in
            channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(makeHandler()) }
        }
        .bind(host: "127.0.0.1", port: 0).get()
    do {
        let result = try await body(channel.localAddress?.port ?? 0)
        try await channel.close()
        return result
    } catch {
        try? await channel.close()  // the body's error is the one worth reporting
        throw error
    }
}

/// What the proxy's connections count into.
private final class ProxyCounter: Sendable {
    let counts = Mutex(CountingProxy.Counts())
    func update(_ change: (inout CountingProxy.Counts) -> Void) { counts.withLock { change(&$0) } }
}

private func basicAuthorization(_ credentials: String) -> String {
    "Basic " + Data(credentials.utf8).base64EncodedString()
}

/// Reads the CONNECT head, opens the tunnel, then glues the two connections together.
private final class ConnectHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let proxy: ProxyCounter
    let expectedAuthorization: String?
    var head = ByteBuffer()
    var connecting = false

    init(proxy: ProxyCounter, expectedAuthorization: String?) {
        self.proxy = proxy
        self.expectedAuthorization = expectedAuthorization
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        guard !connecting else { return }  // the client must wait for the 200 before sending more
        head.writeBuffer(&buffer)
        let text = String(buffer: head)
        guard let end = text.range(of: "\r\n\r\n") else { return }
        connecting = true
        let lines = text[..<end.lowerBound].split(separator: "\r\n", omittingEmptySubsequences: false)
        let requestLine = lines.first?.split(separator: " ") ?? []
        guard requestLine.count == 3, requestLine[0] == "CONNECT",
            let colon = requestLine[1].lastIndex(of: ":"),
            let port = Int(requestLine[1][requestLine[1].index(after: colon)...])
        else {
            refuse(context: context, status: "405 Method Not Allowed")
            return
        }
        let host = String(requestLine[1][..<colon]).trimmingCharacters(in: ["[", "]"])
        if let expectedAuthorization {
            let given = lines.dropFirst().first { $0.lowercased().hasPrefix("proxy-authorization:") }
                .map { $0.dropFirst("proxy-authorization:".count).trimmingCharacters(in: .whitespaces) }
            guard given == expectedAuthorization else {
                refuse(context: context, status: "407 Proxy Authentication Required")
                return
            }
        }
        proxy.update { $0.targets.append(String(requestLine[1])) }
        let client = context.channel
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        ClientBootstrap(group: context.eventLoop).connect(host: host, port: port).whenComplete { result in
            let (handler, context) = loopBound.value
            switch result {
            case .success(let target):
                handler.proxy.update { $0.tunnels += 1 }
                context.writeAndFlush(
                    handler.wrapOutboundOut(ByteBuffer(string: "HTTP/1.1 200 Connection established\r\n\r\n")),
                    promise: nil)
                let (toTarget, toClient) = GlueHandler.pair(counting: handler.proxy)
                do {
                    try target.pipeline.syncOperations.addHandler(toClient)
                    context.pipeline.syncOperations.removeHandler(handler, promise: nil)
                    try client.pipeline.syncOperations.addHandler(toTarget)
                } catch {
                    target.close(promise: nil)
                    client.close(promise: nil)
                }
            case .failure:
                handler.refuse(context: context, status: "502 Bad Gateway")
            }
        }
    }

    func refuse(context: ChannelHandlerContext, status: String) {
        proxy.update { $0.refused += 1 }
        let answer = "HTTP/1.1 \(status)\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        // The context belongs to its loop, where the completion runs.
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: answer))).whenComplete { _ in
            bound.value.close(promise: nil)
        }
    }
}

/// One end of a tunnel: what one channel reads, its partner writes. The client's end also
/// counts bytes and, for plain HTTP, the requests in them.
private final class GlueHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    var partner: GlueHandler?
    var context: ChannelHandlerContext?
    let counter: ProxyCounter?
    var requests = HTTPRequestCounter()

    init(counting counter: ProxyCounter?) { self.counter = counter }

    /// The client's end (reads from the client, counted if `proxy` is given) and the target's end.
    static func pair(counting proxy: ProxyCounter?) -> (fromClient: GlueHandler, fromTarget: GlueHandler) {
        let fromClient = GlueHandler(counting: proxy)
        let fromTarget = GlueHandler(counting: nil)
        fromClient.partner = fromTarget
        fromTarget.partner = fromClient
        return (fromClient, fromTarget)
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        partner = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        if let counter {
            let now = ContinuousClock.now
            let seen = requests.consume(buffer)
            counter.update { counts in
                counts.bytesFromClient += Int64(buffer.readableBytes)
                counts.progress.append((now, counts.bytesFromClient))
                for method in seen.heads { counts.requests[method, default: 0] += 1 }
                for method in seen.whole { counts.wholeRequests[method, default: 0] += 1 }
            }
        }
        partner?.context?.write(wrapOutboundOut(buffer), promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) { partner?.context?.flush() }

    func channelInactive(context: ChannelHandlerContext) { partner?.context?.close(promise: nil) }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
}

/// Follows HTTP/1.1 request framing in a byte stream (heads, then `Content-Length` bodies) and
/// reports each request's method. Bytes that are not HTTP (TLS) stop it for good.
struct HTTPRequestCounter {
    /// The methods of the requests whose heads, and of those whose whole bodies, a read completed.
    struct Seen {
        var heads: [String] = []
        var whole: [String] = []
    }

    private var head: [UInt8] = []
    private var bodyLeft = 0
    /// The method of the request whose body is still arriving.
    private var inBody: String?
    private var gaveUp = false

    mutating func consume(_ buffer: ByteBuffer) -> Seen {
        var seen = Seen()
        guard !gaveUp else { return seen }
        var bytes = buffer.readableBytesView[...]
        while !bytes.isEmpty {
            if bodyLeft > 0 {
                let skipped = min(bodyLeft, bytes.count)
                bodyLeft -= skipped
                bytes = bytes.dropFirst(skipped)
                if bodyLeft == 0, let method = inBody.take() { seen.whole.append(method) }
                continue
            }
            head.append(bytes.removeFirst())
            guard head.count >= 4, head.suffix(4).elementsEqual("\r\n\r\n".utf8) else {
                if head.count == 1 && !(UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(head[0]) { gaveUp = true }
                if gaveUp { return seen }
                continue
            }
            let text = String(decoding: head, as: UTF8.self)
            head = []
            let method = String(text.prefix { $0 != " " })
            seen.heads.append(method)
            for line in text.split(separator: "\r\n") where line.lowercased().hasPrefix("content-length:") {
                bodyLeft = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
            }
            if bodyLeft == 0 { seen.whole.append(method) } else { inBody = method }
        }
        return seen
    }
}

/// A loopback port that forwards every connection to `target`, except that a connection whose
/// first byte starts a TLS hello reaches it only after `handshakeDelay`: a TLS server as slow to
/// answer a handshake as one on a loaded machine, and as quick as ever to hang up on plain HTTP.
public final class SlowHandshakeRelay: Sendable {
    public let port: Int

    private init(port: Int) { self.port = port }

    /// Runs the relay on a free loopback port for the length of `body`.
    public static func with<T>(
        to target: Int, handshakeDelay: Duration, _ body: (SlowHandshakeRelay) async throws -> T
    ) async throws -> T {
        let delay = TimeAmount.nanoseconds(Int64(handshakeDelay / .nanoseconds(1)))
        return try await withLoopbackListener(
            handler: { DelayingHandler(target: target, tlsDelay: delay) },
            body: { try await body(SlowHandshakeRelay(port: $0)) })
    }
}

/// Holds a connection's first bytes, connects to the target (later, for a TLS hello), passes them
/// on, then glues the two connections together.
private final class DelayingHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let target: Int
    let tlsDelay: TimeAmount
    var held: [ByteBuffer] = []
    var connecting = false
    /// The delayed connect, cancelled if the client goes first: a port freed by the test's
    /// server may belong to another test's by then.
    var scheduled: Scheduled<EventLoopFuture<any Channel>>?

    init(target: Int, tlsDelay: TimeAmount) {
        self.target = target
        self.tlsDelay = tlsDelay
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        held.append(buffer)
        guard !connecting else { return }
        connecting = true
        let isTLSHello = buffer.readableBytesView.first == 0x16
        let client = context.channel
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let scheduled = context.eventLoop.scheduleTask(in: isTLSHello ? tlsDelay : .zero) {
            ClientBootstrap(group: client.eventLoop).connect(host: "127.0.0.1", port: loopBound.value.0.target)
        }
        self.scheduled = scheduled
        scheduled.futureResult.flatMap { $0 }.whenComplete { result in
            let (handler, context) = loopBound.value
            guard case .success(let server) = result else {
                client.close(promise: nil)
                return
            }
            let (fromClient, fromServer) = GlueHandler.pair(counting: nil)
            do {
                try server.pipeline.syncOperations.addHandler(fromServer)
                for bytes in handler.held { server.write(bytes, promise: nil) }
                server.flush()
                handler.held = []
                context.pipeline.syncOperations.removeHandler(handler, promise: nil)
                try client.pipeline.syncOperations.addHandler(fromClient)
            } catch {
                server.close(promise: nil)
                client.close(promise: nil)
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        scheduled?.cancel()
        context.fireChannelInactive()
    }
}
