import DopeSync
import Foundation
import Synchronization
import Testing

/// The rules that bind a session to its producer and API, and a URL to an API: values alone, no
/// store (each store only executes them).
@Suite struct BindingRulesTests {
    let alice = Producer(uid: 1001, name: "alice")
    let mallory = Producer(uid: 1002, name: "mallory")
    let staging = "https://staging.example:443"
    let production = "https://api.example:443"

    @Test func aNewSessionIsBoundToItsFirstProducerAndAPI() {
        #expect(
            SessionBinding.decide(existing: nil, producer: alice, api: production)
                == .bind(SessionBinding(api: production, owner: alice), forgetServerIDs: false))
    }

    @Test func theSameProducerOnTheSameAPIResumes() {
        let existing = SessionBinding(api: production, owner: Producer(uid: 1001, name: "alice-elsewhere"))
        #expect(SessionBinding.decide(existing: existing, producer: alice, api: production) == .continuation)
    }

    @Test func anotherProducerIsRefusedWhateverTheAPI() {
        for api in [staging, production] {
            #expect(
                SessionBinding.decide(existing: SessionBinding(api: staging, owner: alice), producer: mallory, api: api)
                    == .anotherProducer(alice))
        }
    }

    @Test func stepsRecordedAgainstAnotherAPIAreForgotten() {
        #expect(
            SessionBinding.decide(
                existing: SessionBinding(api: staging, owner: alice), producer: alice, api: production)
                == .bind(SessionBinding(api: production, owner: alice), forgetServerIDs: true))
    }

    @Test("a session from before bindings: the next bundle's owner adopts it, and its steps stand")
    func aSessionFromBeforeIsAdopted() {
        #expect(
            SessionBinding.decide(existing: SessionBinding(api: nil, owner: nil), producer: mallory, api: production)
                == .bind(SessionBinding(api: production, owner: mallory), forgetServerIDs: false))
    }

    @Test func addressesAreNormalised() {
        #expect(APIAddress.normalized("HTTPS://API.Example/") == "https://api.example:443")
        #expect(APIAddress.normalized("http://127.0.0.1:8080/v1/") == "http://127.0.0.1:8080/v1")
        #expect(APIAddress.normalized("https://user:pw@api.example/?q=1#f") == "https://api.example:443")
    }

    @Test func aURLIsTakenAsItsAPIOnlyWhereNothingElseStandsInTheWay() {
        var book = APIBook()
        #expect(APIBinding.decide(url: production, book: book) == .record(api: production))
        book.sessions = [staging: 8, APIBook.unbound: 3]
        #expect(APIBinding.decide(url: production, book: book) == .needsLookups(others: [staging]))
        book.addresses = ["https://new.example:443": staging]
        #expect(APIBinding.decide(url: "https://new.example:443", book: book) == .known(api: staging))
    }

    /// A producer is named by this host's user database, as claims on several threads name them
    /// at once: each gets its own owner's name, never another thread's, and a uid without an
    /// entry is named by its number. Threads of their own, started together: the cooperative
    /// pool may have a single one.
    @Test func producersAreNamedRightWhileOtherThreadsNameOthers() async {
        let unnamed = UInt32(4_000_123_456)
        #expect(Producer(uid: unnamed).description == "uid \(unnamed)")
        // One at a time, every lookup is right; the two names must differ for a swap to show.
        let expected: [UInt32: String] = [0: Producer(uid: 0).name, 65534: Producer(uid: 65534).name]
        #expect(expected[0] != expected[65534])
        let wrong = Atomic<Int>(0)
        let finished = DispatchGroup()
        let start = DispatchSemaphore(value: 0)
        for thread in 0..<8 {
            finished.enter()
            Thread {
                start.wait()
                for turn in 0..<3000 {
                    let uid: UInt32 = (thread + turn) % 2 == 0 ? 0 : 65534
                    if Producer(uid: uid).name != expected[uid] { wrong.add(1, ordering: .relaxed) }
                }
                finished.leave()
            }.start()
        }
        for _ in 0..<8 { start.signal() }
        await withCheckedContinuation { continuation in finished.notify(queue: .global()) { continuation.resume() } }
        #expect(
            wrong.load(ordering: .relaxed) == 0, "\(wrong.load(ordering: .relaxed)) of 24000 names were another uid's")
    }
}
