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
    /// `firstSeen` (`firstSeenOnBoot` on the boot's clock, recorded if the clock was not
    /// synchronized then). Under a synchronized clock a first sight may be dated again
    /// (``Deferral/firstSeenDatedAgain``):
    /// - by the boot's clock, when it was made on this boot under a clock not synchronized (a
    ///   kiosk's first NTP sync set the clock days forward since: the step is not the bundle's age);
    /// - at `now`, when it is ahead of the clock by more than ``WallClock/stepTolerance`` and
    ///   nothing better is known (the clock has gone back since: the max age could not fire
    ///   until the clock caught up).
    /// Otherwise the wall clock counts, as when nothing can be trusted more: an age counted too
    /// long fails a bundle early (`gave_up`, requeued by a person), one counted too short could
    /// resume it after the server forgot its keys.
    public func deferral(
        attempts: Int, firstSeen: Date, firstSeenOnBoot: BootInstant?, now: Date, nowOnBoot: BootInstant?,
        clockIsSynchronized: Bool
    ) -> Deferral {
        var first = firstSeen
        var datedAgain = false
        if clockIsSynchronized {
            if let then = firstSeenOnBoot, let seconds = nowOnBoot?.seconds(since: then) {
                first = now.addingTimeInterval(-seconds)
                datedAgain = true
            } else if firstSeen > WallClock.latestBelievable(at: now) {
                first = now
                datedAgain = true
            } else {
                // A stamp of another boot says nothing more: it goes, the time stays.
                datedAgain = firstSeenOnBoot != nil
            }
        }
        let age = now.timeIntervalSince(first)
        return Deferral(
            attempts: attempts, nextAttemptAt: nextAttempt(afterAttempt: attempts, now: now), firstSeen: first,
            age: age, exhausted: isExhausted(attempts: attempts, age: age), firstSeenDatedAgain: datedAgain)
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
