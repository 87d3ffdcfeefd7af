import Testing

@testable import DopeSync

/// The worker's side of a lease, on its own clock: no database, no sleeping (instants are made up).
@Suite struct LeaseBookTests {
    let start = ContinuousClock.now

    @Test func aLeaseIsHeldUntilItsDeadlineCountedFromWhenItWasAskedFor() {
        var book = LeaseBook(duration: .seconds(30))
        book.acquired("a.tar", epoch: 3, askedAt: start)
        #expect(book.fence("a.tar", at: start + .seconds(29)) == 3)
        #expect(book.fence("a.tar", at: start + .seconds(30)) == nil)
        #expect(book.fence("b.tar", at: start) == nil)
    }

    @Test func aRenewalMovesTheDeadlineOnlyLaterAndOnlyForTheEpochHeld() {
        var book = LeaseBook(duration: .seconds(30))
        book.acquired("a.tar", epoch: 3, askedAt: start)
        book.renewed(["a.tar"], of: ["a.tar": 3], askedAt: start + .seconds(20))
        #expect(book.fence("a.tar", at: start + .seconds(49)) == 3)
        // An older renewal's answer arriving late changes nothing.
        book.renewed(["a.tar"], of: ["a.tar": 3], askedAt: start + .seconds(10))
        #expect(book.fence("a.tar", at: start + .seconds(49)) == 3)
        // A renewal of an epoch no longer held is ignored.
        book.renewed([], of: ["a.tar": 2], askedAt: start + .seconds(21))
        #expect(book.fence("a.tar", at: start + .seconds(21)) == 3)
    }

    @Test func aLeaseTheDatabaseDidNotRenewIsLostForGood() {
        var book = LeaseBook(duration: .seconds(30))
        book.acquired("a.tar", epoch: 1, askedAt: start)
        book.acquired("b.tar", epoch: 7, askedAt: start)
        book.renewed(["b.tar"], of: ["a.tar": 1, "b.tar": 7], askedAt: start + .seconds(10))
        #expect(book.fence("a.tar", at: start + .seconds(11)) == nil)
        #expect(book.fence("b.tar", at: start + .seconds(11)) == 7)
        // Lost stays lost, even if a later renewal names it.
        book.renewed(["a.tar"], of: ["a.tar": 1], askedAt: start + .seconds(12))
        #expect(book.fence("a.tar", at: start + .seconds(13)) == nil)
        #expect(book.renewable(at: start + .seconds(13)) == ["b.tar": 7])
    }

    @Test func aRefusedWriteLosesTheLeaseAndAReleaseForgetsIt() {
        var book = LeaseBook(duration: .seconds(30))
        book.acquired("a.tar", epoch: 1, askedAt: start)
        book.lost("a.tar", epoch: 1)
        #expect(book.fence("a.tar", at: start) == nil)
        book.acquired("a.tar", epoch: 2, askedAt: start + .seconds(1))
        #expect(book.fence("a.tar", at: start + .seconds(1)) == 2)
        book.released("a.tar")
        #expect(book.renewable(at: start + .seconds(1)).isEmpty)
    }
}
