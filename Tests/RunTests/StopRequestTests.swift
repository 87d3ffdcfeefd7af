import Testing

@testable import DopeSync

/// The waits every request makes beside it (``StopRequest/sleep(_:for:endsAtRequest:)``): they
/// end when the request does, at the deadline, when the stop's grace is over, or when the task
/// is cancelled, whichever comes first, and in whatever order the request and the wait begin. A
/// wait that missed its end would hold a request's slot for its whole deadline (here ten
/// minutes, past the suite's time limit); one that left something in the stop's books would
/// grow them with every request of a run.
@Suite(.timeLimit(.minutes(3))) struct StopRequestTests {
    @Test("a wait the request ended before it began returns at once, not at its deadline")
    func endedBeforeItBegan() async {
        let stop = StopRequest()
        let wait = stop.makeWait()
        wait.end()
        #expect(await stop.sleep(wait, for: .seconds(600)) == .ended)
        #expect(stop.waitsNotOver == 0)
    }

    @Test("a wait ended while it waits returns at once")
    func endedWhileWaiting() async {
        let stop = StopRequest()
        let wait = stop.makeWait()
        async let wake = stop.sleep(wait, for: .seconds(600))
        while !stop.isWaiting(wait) { await Task.yield() }
        wait.end()
        #expect(await wake == .ended)
        #expect(stop.waitsNotOver == 0)
    }

    @Test("a request and its wait ending in either order: always .ended, nothing left behind")
    func endedInEitherOrder() async {
        let stop = StopRequest()
        for _ in 0..<200 {
            let wait = stop.makeWait()
            async let wake = stop.sleep(wait, for: .seconds(600))
            wait.end()
            #expect(await wake == .ended)
        }
        #expect(stop.waitsNotOver == 0)
    }

    @Test("a wait whose deadline passes says so, and its request's end afterwards leaves nothing")
    func endedAfterItsDeadline() async {
        let stop = StopRequest()
        let late = stop.makeWait()
        #expect(await stop.sleep(late, for: .milliseconds(5)) == .timeUp)
        late.end()
        late.end()
        #expect(stop.waitsNotOver == 0)
    }

    @Test("a wait whose task is cancelled says so, and its request's end afterwards leaves nothing")
    func cancelled() async {
        let stop = StopRequest()
        let wait = stop.makeWait()
        let waiting = Task { await stop.sleep(wait, for: .seconds(600)) }
        while !stop.isWaiting(wait) { await Task.yield() }
        waiting.cancel()
        #expect(await waiting.value == .cancelled)
        wait.end()
        #expect(stop.waitsNotOver == 0)
    }

    @Test("once the stop's grace is over, a wait returns at once, and its end leaves nothing")
    func graceOver() async {
        let stop = StopRequest(grace: .milliseconds(1))
        stop.request()
        for _ in 0..<2 {
            let wait = stop.makeWait()
            #expect(await stop.sleep(wait, for: .seconds(600)) == .graceOver)
            wait.end()
        }
        #expect(stop.waitsNotOver == 0)
    }
}
