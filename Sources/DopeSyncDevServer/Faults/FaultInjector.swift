import Synchronization

/// What happens to one `/api` POST, decided when it arrives.
struct FaultDecision: Sendable, Equatable {
    enum Early: Sendable, Equatable {
        /// Answer 500 or 503 before doing anything.
        case serverError(status: Int)
        /// Answer 429 with `Retry-After` before doing anything.
        case rateLimited
    }

    var early: Early? = nil
    /// Commit, then close the connection without answering.
    var dropAfterCommit = false
    /// Milliseconds to wait while holding the idempotency key.
    var latencyMilliseconds = 0

    static let none = FaultDecision()
}

/// Draws each POST's faults from a seeded generator, so a seed replays the same faults for the
/// same sequence of requests. The configuration may be replaced while running (`PUT /admin/faults`).
final class FaultInjector: Sendable {
    private struct State {
        var configuration: FaultConfiguration
        var generator: SplitMix64
    }

    private let state: Mutex<State>

    init(_ configuration: FaultConfiguration) {
        state = Mutex(State(configuration: configuration, generator: SplitMix64(seed: configuration.seed)))
    }

    var configuration: FaultConfiguration { state.withLock { $0.configuration } }

    /// Replaces the configuration; the generator restarts from the new seed.
    func replace(_ configuration: FaultConfiguration) {
        state.withLock { $0 = State(configuration: configuration, generator: SplitMix64(seed: configuration.seed)) }
    }

    /// The fate of the next POST. Every call draws the same number of values in the same order,
    /// whatever it decides, so one request's outcome never shifts the next one's draws.
    func decide() -> FaultDecision {
        state.withLock { state -> FaultDecision in
            let configuration = state.configuration
            guard configuration.isActive else { return .none }
            let failDraw = state.generator.nextUnit()
            let statusDraw = state.generator.nextUnit()
            let rateLimitDraw = state.generator.nextUnit()
            let dropDraw = state.generator.nextUnit()
            let latencyDraw = state.generator.next()

            var decision = FaultDecision()
            if failDraw < configuration.failRate {
                decision.early = .serverError(status: statusDraw < 0.5 ? 500 : 503)
            } else if rateLimitDraw < configuration.rateLimitRate {
                decision.early = .rateLimited
            }
            decision.dropAfterCommit = dropDraw < configuration.dropAfterCommitRate
            let range = configuration.latencyMilliseconds
            let span = UInt64(range.upperBound - range.lowerBound) + 1
            decision.latencyMilliseconds = range.lowerBound + Int(latencyDraw % span)
            return decision
        }
    }
}

/// A small, fast, seedable generator (Steele, Lea and Flood's SplitMix64).
struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform value in [0, 1).
    mutating func nextUnit() -> Double { Double(next() >> 11) * 0x1.0p-53 }
}
