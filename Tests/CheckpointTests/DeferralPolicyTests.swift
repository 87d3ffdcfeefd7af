import DopeSync
import Foundation
import Testing

@Suite struct DeferralPolicyTests {
    @Test(arguments: [
        (1, 60), (2, 120), (3, 240), (4, 480), (5, 960), (6, 1920), (7, 3600), (8, 3600), (1000, 3600), (Int.max, 3600),
    ])
    func delayGrowsAndIsCapped(attempt: Int, seconds: Int) {
        #expect(DeferralPolicy().delay(afterAttempt: attempt) == .seconds(seconds))
    }

    @Test func configurable() {
        let policy = DeferralPolicy(base: .seconds(10), factor: 3, cap: .seconds(100))
        #expect(
            (1...5).map { policy.delay(afterAttempt: $0) } == [
                .seconds(10), .seconds(30), .seconds(90), .seconds(100), .seconds(100),
            ])
        let now = Date(timeIntervalSince1970: 1_000_000)
        #expect(policy.nextAttempt(afterAttempt: 2, now: now) == now.addingTimeInterval(30))
    }

    @Test func exhaustedByAttemptsOrAge() {
        let policy = DeferralPolicy(maxAttempts: 3, maxAge: .seconds(3600))
        let first = Date(timeIntervalSince1970: 1_000_000)
        #expect(!policy.isExhausted(attempts: 2, firstSeen: first, now: first.addingTimeInterval(10)))
        #expect(policy.isExhausted(attempts: 3, firstSeen: first, now: first.addingTimeInterval(10)))
        #expect(policy.isExhausted(attempts: 1, firstSeen: first, now: first.addingTimeInterval(3600)))
        let unlimited = DeferralPolicy(maxAttempts: nil, maxAge: nil)
        #expect(!unlimited.isExhausted(attempts: 1_000_000, firstSeen: .distantPast, now: first))
    }

    @Test func defaultMaxAgeStaysBelowTheServersSevenDayKeyRetention() throws {
        let maxAge = try #require(DeferralPolicy().maxAge)
        #expect(maxAge < .seconds(7 * 24 * 3600))
    }
}
