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
                nowOnBoot: nil, clockIsSynchronized: true
            ).exhausted
        }
        #expect(!exhausted(2, after: 10, policy))
        #expect(exhausted(3, after: 10, policy))
        #expect(exhausted(1, after: 3600, policy))
        #expect(!exhausted(1_000_000, after: 1e9, DeferralPolicy(maxAttempts: nil, maxAge: nil)))
    }

    /// A kiosk boots 10 days behind, first sees a bundle (the clock not synchronized: the sight is
    /// stamped on the boot's clock), and NTP then sets its clock forward: on that boot, under the
    /// synchronized clock, the first sight is dated again by the boot's clock, and the step does
    /// not use up the max age. Wherever that cannot be trusted, the wall clock counts: an age
    /// counted too short could resume a bundle after the server forgot its keys.
    @Test func aFirstSightBeforeNTPIsDatedAgainByTheBootsClock() {
        let policy = DeferralPolicy(maxAttempts: nil, maxAge: .seconds(6 * 86_400))
        let behind = Date(timeIntervalSince1970: 1_000_000)
        let setRight = behind.addingTimeInterval(10 * 86_400 + 60)
        let seen = BootInstant(bootID: "boot-1", secondsSinceBoot: 30)
        func deferral(at bootSeconds: Double, of boot: String = "boot-1", synchronized: Bool = true) -> Deferral {
            policy.deferral(
                attempts: 2, firstSeen: behind, firstSeenOnBoot: seen, now: setRight,
                nowOnBoot: BootInstant(bootID: boot, secondsSinceBoot: bootSeconds), clockIsSynchronized: synchronized)
        }
        let sameBoot = deferral(at: 90)
        #expect(sameBoot.age == 60 && !sameBoot.exhausted && sameBoot.firstSeenDatedAgain)
        #expect(sameBoot.firstSeen == setRight.addingTimeInterval(-60))
        #expect(sameBoot.nextAttemptAt == setRight.addingTimeInterval(120))
        // Six days on the boot's clock are six days.
        #expect(deferral(at: 30 + 6 * 86_400).exhausted)
        // Another boot: the stamp says nothing; it goes, and the wall clock counts.
        let nextBoot = deferral(at: 90, of: "boot-2")
        #expect(nextBoot.age == 10 * 86_400 + 60 && nextBoot.exhausted)
        #expect(nextBoot.firstSeen == behind && nextBoot.firstSeenDatedAgain)
        // The boot's clock before the stamp: not one clock (a restored snapshot); the wall counts.
        #expect(deferral(at: 10).exhausted)
        // Within the tolerance of two readings of one transaction: no time at all.
        #expect(deferral(at: 28).age == 0)
        // Not synchronized yet: nothing says the wall clock was wrong then rather than now.
        let unsynchronized = deferral(at: 90, synchronized: false)
        #expect(unsynchronized.exhausted && !unsynchronized.firstSeenDatedAgain)
    }

    /// A first sight more than 5 minutes ahead of a synchronized clock, with no stamp of this boot:
    /// recorded under a clock that has gone back since; the max age counts from now.
    @Test func aFirstSightAheadOfASynchronizedClockCountsFromNow() {
        let policy = DeferralPolicy(maxAttempts: nil, maxAge: .seconds(6 * 86_400))
        let now = Date(timeIntervalSince1970: 1_000_000)
        func deferral(firstSeen: Date, synchronized: Bool) -> Deferral {
            policy.deferral(
                attempts: 1, firstSeen: firstSeen, firstSeenOnBoot: nil, now: now, nowOnBoot: nil,
                clockIsSynchronized: synchronized)
        }
        let aYearOn = deferral(firstSeen: now.addingTimeInterval(365 * 86_400), synchronized: true)
        #expect(aYearOn.firstSeen == now && aYearOn.age == 0 && aYearOn.firstSeenDatedAgain)
        let aMinuteOn = deferral(firstSeen: now.addingTimeInterval(60), synchronized: true)
        #expect(aMinuteOn.firstSeen == now.addingTimeInterval(60) && !aMinuteOn.firstSeenDatedAgain)
        #expect(!deferral(firstSeen: now.addingTimeInterval(365 * 86_400), synchronized: false).firstSeenDatedAgain)
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
