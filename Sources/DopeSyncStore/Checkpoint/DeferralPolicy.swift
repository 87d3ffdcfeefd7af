import DopeSyncBundle
import DopeSyncSupport
import Foundation

/// When a deferred bundle is tried again, and when deferring stops and the bundle fails.
///
/// A pure value: attempt *n* (1-based) waits `base × factor^(n-1)`, capped at `cap`. No jitter: a
/// deferred bundle is picked up by the next scheduled run after its time, and runs are already spread
/// by cron or by systemd's `RandomizedDelaySec`. The default max age stays below the server's
/// 7-day idempotency-key retention, so a bundle never resumes after the server forgot its keys.
public struct DeferralPolicy: Sendable, Hashable {
    public var base: Duration
    public var factor: Double
    public var cap: Duration
    /// After this many counted attempts the bundle fails (nil: no limit).
    public var maxAttempts: Int?
    /// After this long since first seen the bundle fails instead of being deferred again (nil: no limit).
    public var maxAge: Duration?

    public init(
        base: Duration = .seconds(60), factor: Double = 2, cap: Duration = .seconds(3600), maxAttempts: Int? = 20,
        maxAge: Duration? = .seconds(6 * 24 * 3600)
    ) {
        self.base = base
        self.factor = factor
        self.cap = cap
        self.maxAttempts = maxAttempts
        self.maxAge = maxAge
    }

    /// How long to wait after the `attempt`-th deferral (1 for the first).
    public func delay(afterAttempt attempt: Int) -> Duration {
        let capSeconds = cap.seconds
        var seconds = base.seconds
        var remaining = max(attempt, 1) - 1
        // Multiply step by step and stop at the cap: no overflow to infinity for attempt 10,000.
        while remaining > 0 && seconds < capSeconds {
            seconds *= factor
            remaining -= 1
        }
        return .milliseconds(Int64((min(seconds, capSeconds) * 1000).rounded()))
    }

    /// The next attempt time after the `attempt`-th deferral at `now`.
    public func nextAttempt(afterAttempt attempt: Int, now: Date) -> Date {
        now.addingTimeInterval(delay(afterAttempt: attempt).seconds)
    }

    /// Whether a bundle with `attempts` counted attempts, first seen `age` seconds ago, must fail now.
    public func isExhausted(attempts: Int, age: TimeInterval) -> Bool {
        if let maxAttempts, attempts >= maxAttempts { return true }
        if let maxAge, age >= maxAge.seconds { return true }
        return false
    }

    /// The deferral counted at `now` of a bundle with `attempts` attempts, first seen at
    /// `firstSeen` (`firstSeenOnBoot` on the boot's own clock, if it was recorded): its age counts
    /// on the boot's clock when both moments are of one boot, so a wall clock set forward since
    /// (a kiosk's first NTP sync after days without power) does not age it by the step.
    public func deferral(
        attempts: Int, firstSeen: Date, firstSeenOnBoot: BootInstant?, now: Date, nowOnBoot: BootInstant?
    ) -> Deferral {
        let age = BootInstant.elapsed(from: (firstSeen, firstSeenOnBoot), to: (now, nowOnBoot))
        return Deferral(
            attempts: attempts, nextAttemptAt: nextAttempt(afterAttempt: attempts, now: now), firstSeen: firstSeen,
            age: age, exhausted: isExhausted(attempts: attempts, age: age))
    }

    /// `20 attempts or 6 days`, for a person.
    package var limitsText: String {
        let attempts = maxAttempts.map { "\($0) attempts" }
        let age = maxAge.map { "\(Int(($0 / .seconds(86_400)).rounded())) days" }
        return [attempts, age].compactMap { $0 }.joined(separator: " or ")
    }
}

extension Duration {
    /// The duration in seconds, as a Double (file-private: other parts of the module may want their own).
    fileprivate var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }

}
