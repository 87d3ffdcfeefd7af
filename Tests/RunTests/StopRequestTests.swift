import Testing

@testable import DopeSync

/// The waits every request makes beside it (``StopRequest/sleep(_:for:endsAtRequest:)``): they
/// end when the request does, at the deadline, or when the stop's grace is over, whichever
/// comes first, and in whatever order the request and the wait begin. A wait that missed its
/// end would hold a request's slot for its whole deadline (here ten minutes, past the suite's
/// time limit).
@Suite(.timeLimit(.minutes(1))) struct StopRequestTests {
    @Test("a wait the request ended before it began returns at once, not at its deadline")
    func endedBeforeItBegan() async {
        let stop = StopRequest()
        let wait = stop.makeWait()
        wait.end()
        #expect(await stop.sleep(wait, for: .seconds(600)) == .ended)
    }

    @Test("a wait ended while it waits returns at once, whichever of the two starts first")
    func endedWhileWaiting() async {
        let stop = StopRequest()
        for _ in 0..<200 {
            let wait = stop.makeWait()
            async let wake = stop.sleep(wait, for: .seconds(600))
            wait.end()
            #expect(await wake == .ended)
        }
    }

    @Test("a wait whose deadline passes says so; ending it afterwards changes nothing for the next")
    func endedAfterItsDeadline() async {
        let stop = StopRequest()
        let late = stop.makeWait()
        #expect(await stop.sleep(late, for: .milliseconds(5)) == .timeUp)
        late.end()
        late.end()
        #expect(await stop.sleep(stop.makeWait(), for: .milliseconds(5)) == .timeUp)
    }

    @Test("once the stop's grace is over, a wait returns at once, ended or not")
    func graceOver() async {
        let stop = StopRequest(grace: .milliseconds(1))
        stop.request()
        #expect(await stop.sleep(stop.makeWait(), for: .seconds(600)) == .graceOver)
        #expect(await stop.sleep(stop.makeWait(), for: .seconds(600)) == .graceOver)
    }
}
