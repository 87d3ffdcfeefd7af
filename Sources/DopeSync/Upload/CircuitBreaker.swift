/// Decides when a run stops claiming because the API is down or most steps fail, so a broken
/// server gets a pause (exit 75, bundles deferred) instead of a retry storm from every worker.
///
/// It judges *steps*, each already retried with backoff (`RetryPolicy`), not single requests:
/// a server failing a third of its requests still gets nearly every step through, and a run
/// that stopped for it would only delay good work. A value type fed with what happened and
/// answering whether to open; it never sleeps, sends or reads a clock, so its rules are tested
/// on their own (`CircuitBreakerTests`).
public struct CircuitBreaker: Sendable, Equatable {
    public struct Policy: Sendable, Equatable {
        /// Steps in a row that kept failing after all their retries.
        public var failingStepsInARow = 3
        /// The last steps the failures are counted over.
        public var window = 10
        /// Open when more than this share of a whole window of steps kept failing (6 of 10).
        /// Counted against the whole window even before it fills.
        public var failureRatio = 0.5

        public init() {}
    }

    /// How one step ended.
    public enum Event: Sendable, Equatable {
        /// The server took it, or answered with a final answer (4xx): it is working.
        case stepAnswered
        /// It gave up after every retry; `answered` false when no HTTP answer ever came (refused,
        /// timed out): the API is unreachable, and the breaker opens at once.
        case stepKeptFailing(answered: Bool)
    }

    public let policy: Policy
    /// Why it opened (for the log), nil while closed.
    public private(set) var openReason: String?
    private var recent: [Bool] = []  // true: kept failing; a ring of the last `window` steps
    private var next = 0
    private var failingInARow = 0

    public init(policy: Policy = Policy()) {
        self.policy = policy
    }

    public var isOpen: Bool { openReason != nil }

    /// Records how a step ended; returns the reason when this step opened the breaker.
    @discardableResult
    public mutating func record(_ event: Event) -> String? {
        guard !isOpen else { return nil }
        let failed = event != .stepAnswered
        if recent.count < policy.window {
            recent.append(failed)
        } else {
            recent[next] = failed
            next = (next + 1) % policy.window
        }
        failingInARow = failed ? failingInARow + 1 : 0
        let failures = recent.count { $0 }
        if event == .stepKeptFailing(answered: false) {
            openReason = "the API did not answer"
        } else if failingInARow >= policy.failingStepsInARow {
            openReason = "\(failingInARow) steps in a row kept failing after their retries"
        } else if Double(failures) > Double(policy.window) * policy.failureRatio {
            openReason = "\(failures) of the last \(recent.count) steps kept failing after their retries"
        }
        return openReason
    }
}
