import Testing

@testable import DopeSync

/// The breaker's rules on their own: no server, no clock, no sleeping.
@Suite struct CircuitBreakerTests {
    @Test("a step that got no answer at all opens it at once")
    func noAnswerOpens() {
        var breaker = CircuitBreaker()
        #expect(breaker.record(.stepKeptFailing(answered: false)) == "the API did not answer")
        #expect(breaker.isOpen)
        #expect(breaker.record(.stepAnswered) == nil, "it stays open for the rest of the run")
        #expect(breaker.isOpen)
    }

    @Test("three steps in a row that kept failing open it; a step answered in between resets the count")
    func failingStepsInARow() {
        var breaker = CircuitBreaker()
        breaker.record(.stepKeptFailing(answered: true))
        breaker.record(.stepKeptFailing(answered: true))
        breaker.record(.stepAnswered)
        breaker.record(.stepKeptFailing(answered: true))
        breaker.record(.stepKeptFailing(answered: true))
        #expect(!breaker.isOpen)
        #expect(breaker.record(.stepKeptFailing(answered: true)) == "3 steps in a row kept failing after their retries")
    }

    @Test("more than half of the last 10 steps failing opens it, even never 3 in a row")
    func mostStepsFailing() {
        var breaker = CircuitBreaker()
        var opened: String?
        // fail, fail, answered, repeated: two of every three steps keep failing.
        for index in 0..<30 where opened == nil {
            opened = breaker.record(index % 3 == 2 ? .stepAnswered : .stepKeptFailing(answered: true))
        }
        #expect(opened == "6 of the last 8 steps kept failing after their retries")
    }

    @Test("a server that fails some steps but answers most never opens it")
    func someStepsFailing() {
        var breaker = CircuitBreaker()
        // One step in three keeps failing (after retries, that is a badly broken server), forever.
        for index in 0..<1000 { breaker.record(index % 3 == 0 ? .stepKeptFailing(answered: true) : .stepAnswered) }
        #expect(!breaker.isOpen)
        // Every other step: 5 of every 10, never more than half of a window, never 3 in a row.
        var half = CircuitBreaker()
        for index in 0..<1000 {
            half.record(index.isMultiple(of: 2) ? .stepKeptFailing(answered: true) : .stepAnswered)
        }
        #expect(!half.isOpen)
    }

    @Test("the window slides: old failures age out")
    func windowSlides() {
        var breaker = CircuitBreaker()
        for index in 0..<10 {
            breaker.record(index.isMultiple(of: 2) ? .stepKeptFailing(answered: true) : .stepAnswered)
        }  // 5 of 10
        for _ in 0..<10 { breaker.record(.stepAnswered) }  // those 5 age out
        for index in 0..<10 {
            breaker.record(index.isMultiple(of: 2) ? .stepKeptFailing(answered: true) : .stepAnswered)
        }  // 5 of 10 again
        #expect(!breaker.isOpen)
        breaker.record(.stepKeptFailing(answered: true))  // replaces the oldest, a failure: still 5
        #expect(!breaker.isOpen)
        breaker.record(.stepKeptFailing(answered: true))  // replaces an answered step: 6 of 10
        #expect(breaker.openReason == "6 of the last 10 steps kept failing after their retries")
    }
}
