/// Decides when a run stops claiming because the API is down or mostly failing, so a broken
/// server gets a pause (exit 75, bundles deferred) instead of a retry storm from every worker.
///
/// A value type fed with what happened and answering whether to open; it never sleeps, sends or
/// reads a clock, so its rules are tested on their own (`CircuitBreakerTests`).
public struct CircuitBreaker: Sendable, Equatable {
    public struct Policy: Sendable, Equatable {
        /// Steps in a row that kept failing after all their retries.
        public var failingStepsInARow = 3
        /// The last requests the failures are counted over.
        public var window = 20
        /// Open when more than this share of a whole window failed (11 of 20). Counted against the
        /// whole window even before it fills, so two unlucky first requests are not "most".
        public var failureRatio = 0.5

        public init() {}
    }

    /// What one request or step came to.
    public enum Event: Sendable, Equatable {
        /// The server answered with a success, or with a final answer (4xx): it is working.
        case requestAnswered
        /// A retryable failure: 5xx, 429 or no answer at all.
        case requestFailed
        /// A step gave up after every retry; `answered` false when no HTTP answer ever came.
        case stepKeptFailing(answered: Bool)
    }

    public let policy: Policy
    /// Why it opened (for the log and the summary), nil while closed.
    public private(set) var openReason: String?
    private var recent: [Bool] = []  // true: failed; a ring of the last `window` requests
    private var next = 0
    private var failingStepsInARow = 0

    public init(policy: Policy = Policy()) {
        self.policy = policy
    }

    public var isOpen: Bool { openReason != nil }

    /// Records what happened; returns the reason when this event opened the breaker.
    @discardableResult
    public mutating func record(_ event: Event) -> String? {
        guard !isOpen else { return nil }
        switch event {
        case .requestAnswered, .requestFailed:
            let failed = event == .requestFailed
            if !failed { failingStepsInARow = 0 }
            if recent.count < policy.window {
                recent.append(failed)
            } else {
                recent[next] = failed
                next = (next + 1) % policy.window
            }
            let failures = recent.count { $0 }
            if Double(failures) > Double(policy.window) * policy.failureRatio {
                openReason = "\(failures) of the last \(recent.count) requests failed"
            }
        case .stepKeptFailing(answered: false):
            openReason = "the API did not answer"
        case .stepKeptFailing(answered: true):
            failingStepsInARow += 1
            if failingStepsInARow >= policy.failingStepsInARow {
                openReason = "\(failingStepsInARow) steps in a row kept failing after their retries"
            }
        }
        return openReason
    }
}
