import Synchronization

/// Counters and a bounded log of recent requests, for tests to assert on through
/// `GET /admin/stats` and `GET /admin/requests`. One short lock per request: cheap enough for
/// the benchmark.
final class Observatory: Sendable {
    /// One answered (or dropped) request, as `GET /admin/requests` lists it.
    struct RequestRecord: Sendable {
        let sequence: Int
        let method: String
        let path: String
        let idempotencyKey: String?
        /// The status sent; for a dropped connection, the status that was not sent.
        let status: Int
        let replayed: Bool
        /// `server_error`, `rate_limited`, `dropped_after_commit`, or nil.
        let fault: String?
        let durationMicroseconds: Int
        /// When the request arrived, in microseconds since the server started: with the duration,
        /// where a client's time goes between one request's answer and its next request.
        let receivedMicroseconds: Int

        /// The duration as the log and the server's log lines give it.
        var durationMilliseconds: Double { Double(durationMicroseconds) / 1000 }

        var jsonText: String {
            var text = #"{"seq":\#(sequence),"method":"#
            text.appendJSONString(method)
            text += #","path":"#
            text.appendJSONString(path)
            text += #","idempotencyKey":"#
            if let idempotencyKey { text.appendJSONString(idempotencyKey) } else { text += "null" }
            text += #","status":\#(status),"replayed":\#(replayed),"dropped":\#(fault == Observatory.droppedFault)"#
            text += #","fault":"#
            if let fault { text.appendJSONString(fault) } else { text += "null" }
            text += #","durationMs":\#(durationMilliseconds)"#
            text += #","receivedMs":\#(Double(receivedMicroseconds) / 1000)}"#
            return text
        }
    }

    static let droppedFault = "dropped_after_commit"

    private struct State {
        var requests = 0
        var byStatus: [Int: Int] = [:]
        var created: [RecordKind: Int] = [:]
        var replays = 0
        var faults: [String: Int] = [:]
        /// Reads of each reference list by status (200 or 304).
        var listReads: [String: [Int: Int]] = [:]
        var nextSequence = 1
        var log: [RequestRecord] = []
        /// Where the oldest entry is once `log` is full (a ring buffer).
        var logStart = 0
    }

    private let state = Mutex(State())
    private let capacity: Int

    /// What ``RequestRecord/receivedMicroseconds`` counts from.
    private let started = ContinuousClock.now

    init(capacity: Int) { self.capacity = max(1, capacity) }

    func recordCreated(_ kind: RecordKind) {
        state.withLock { $0.created[kind, default: 0] += 1 }
    }

    /// Counts one answered read of a reference list (`rifles`, `ammunition`, `locations`).
    func recordListRead(_ list: String, status: Int) {
        state.withLock { $0.listReads[list, default: [:]][status, default: 0] += 1 }
    }

    /// Counts the request and logs it; returns its log entry.
    @discardableResult
    func record(
        method: String, path: String, idempotencyKey: String?, status: Int, replayed: Bool, fault: String?,
        received: ContinuousClock.Instant, answered: ContinuousClock.Instant
    ) -> RequestRecord {
        let durationMicroseconds = Int((answered - received) / .microseconds(1))
        let receivedMicroseconds = Int((received - started) / .microseconds(1))
        return state.withLock { state in
            state.requests += 1
            state.byStatus[status, default: 0] += 1
            if replayed { state.replays += 1 }
            if let fault { state.faults[fault, default: 0] += 1 }
            let entry = RequestRecord(
                sequence: state.nextSequence, method: method, path: path, idempotencyKey: idempotencyKey,
                status: status,
                replayed: replayed, fault: fault, durationMicroseconds: durationMicroseconds,
                receivedMicroseconds: receivedMicroseconds)
            state.nextSequence += 1
            if state.log.count < capacity {
                state.log.append(entry)
            } else {
                state.log[state.logStart] = entry
                state.logStart = (state.logStart + 1) % capacity
            }
            return entry
        }
    }

    /// `{"requests": N, "byStatus": {...}, "created": {...}, "replays": N, "faults": {...},
    /// "referenceLists": {"rifles": {"200": N, "304": N}, ...}}`.
    func statsJSON() -> String {
        state.withLock { state in
            var text = #"{"requests":\#(state.requests),"replays":\#(state.replays),"created":{"#
            text += RecordKind.allCases.map { #""\#($0.rawValue)":\#(state.created[$0, default: 0])"# }.joined(
                separator: ",")
            text += #"},"byStatus":{"#
            text += state.byStatus.sorted { $0.key < $1.key }.map { #""\#($0.key)":\#($0.value)"# }.joined(
                separator: ",")
            text += #"},"faults":{"#
            let faultNames = ["server_error", "rate_limited", Observatory.droppedFault]
            text += faultNames.map { #""\#($0)":\#(state.faults[$0, default: 0])"# }.joined(separator: ",")
            text += #"},"referenceLists":{"#
            text += ["rifles", "ammunition", "locations"].map { list in
                let reads = state.listReads[list, default: [:]]
                return #""\#(list)":{"200":\#(reads[200, default: 0]),"304":\#(reads[304, default: 0])}"#
            }.joined(separator: ",")
            text += "}}"
            return text
        }
    }

    /// Logged requests with a sequence number of at least `since`, oldest first.
    func requests(since: Int, limit: Int) -> [RequestRecord] {
        state.withLock { state in
            let ordered = state.log[state.logStart...] + state.log[..<state.logStart]
            return Array(ordered.lazy.filter { $0.sequence >= since }.prefix(limit))
        }
    }

    /// The sequence number the next request will get (for `?since=`).
    var nextSequence: Int { state.withLock { $0.nextSequence } }

    /// Forgets counters and the request log (sequence numbers keep counting).
    func reset() {
        state.withLock { state in
            let next = state.nextSequence
            state = State()
            state.nextSequence = next
        }
    }
}
