import DopeSync
import DopeSyncSupport
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
        func exhausted(_ attempts: Int, after seconds: TimeInterval, _ policy: DeferralPolicy) -> Bool {
            policy.deferral(
                attempts: attempts, firstSeen: first, firstSeenOnBoot: nil, now: first.addingTimeInterval(seconds),
                nowOnBoot: nil
            ).exhausted
        }
        #expect(!exhausted(2, after: 10, policy))
        #expect(exhausted(3, after: 10, policy))
        #expect(exhausted(1, after: 3600, policy))
        #expect(!exhausted(1_000_000, after: 1e9, DeferralPolicy(maxAttempts: nil, maxAge: nil)))
    }

    /// A kiosk boots days behind, first sees a bundle, and NTP then sets its clock forward: on
    /// that boot the age counts on the boot's clock, so the step does not use up the max age.
    /// Across boots (or hosts), only the wall clock is there to count by.
    @Test func ageCountsOnTheBootsClockWithinOneBoot() {
        let policy = DeferralPolicy(maxAttempts: nil, maxAge: .seconds(6 * 86_400))
        let behind = Date(timeIntervalSince1970: 1_000_000)
        let setRight = behind.addingTimeInterval(10 * 86_400 + 60)
        let seen = BootInstant(bootID: "boot-1", secondsSinceBoot: 30)
        let sameBoot = policy.deferral(
            attempts: 2, firstSeen: behind, firstSeenOnBoot: seen, now: setRight,
            nowOnBoot: BootInstant(bootID: "boot-1", secondsSinceBoot: 90))
        #expect(sameBoot.age == 60 && !sameBoot.exhausted)
        #expect(sameBoot.nextAttemptAt == setRight.addingTimeInterval(120))
        let nextBoot = policy.deferral(
            attempts: 2, firstSeen: behind, firstSeenOnBoot: seen, now: setRight,
            nowOnBoot: BootInstant(bootID: "boot-2", secondsSinceBoot: 90))
        #expect(nextBoot.age == 10 * 86_400 + 60 && nextBoot.exhausted)
        // Six days on the boot's clock are six days, whatever the wall clock says.
        let sixDaysOn = policy.deferral(
            attempts: 2, firstSeen: behind, firstSeenOnBoot: seen, now: behind,
            nowOnBoot: BootInstant(bootID: "boot-1", secondsSinceBoot: 30 + 6 * 86_400))
        #expect(sixDaysOn.exhausted)
    }

    @Test func bootInstantsAreStoredAndReadBack() {
        let instant = BootInstant(bootID: "5e0c2a1e-7d43-4b8e-9b55-3f1a2f0c9d11", secondsSinceBoot: 12_345.678)
        #expect(BootInstant(stored: instant.stored) == instant)
        for stored in [nil, "", "@12", "boot", "boot@", "boot@x", "boot@inf"] {
            #expect(BootInstant(stored: stored) == nil, "\(stored ?? "nil")")
        }
    }

    @Test func defaultMaxAgeStaysBelowTheServersSevenDayKeyRetention() throws {
        let maxAge = try #require(DeferralPolicy().maxAge)
        #expect(maxAge < .seconds(7 * 24 * 3600))
    }
}
