import Testing

@testable import DopeSync

/// The breaker's rules on their own: no server, no clock, no sleeping.
@Suite struct CircuitBreakerTests {
    @Test("a step that got no answer at all opens it at once")
    func noAnswerOpens() {
        var breaker = CircuitBreaker()
        #expect(breaker.record(.stepKeptFailing(answered: false)) == "the API did not answer")
        #expect(breaker.isOpen)
    }

    @Test("three steps in a row that kept failing open it; a success in between resets the count")
    func failingStepsInARow() {
        var breaker = CircuitBreaker()
        breaker.record(.stepKeptFailing(answered: true))
        breaker.record(.stepKeptFailing(answered: true))
        breaker.record(.requestAnswered)
        breaker.record(.stepKeptFailing(answered: true))
        breaker.record(.stepKeptFailing(answered: true))
        #expect(!breaker.isOpen)
        #expect(breaker.record(.stepKeptFailing(answered: true)) == "3 steps in a row kept failing after their retries")
    }

    @Test("more than half of the last 20 requests failing opens it; half does not")
    func mostRequestsFailing() {
        var half = CircuitBreaker()
        for index in 0..<200 { half.record(index.isMultiple(of: 2) ? .requestFailed : .requestAnswered) }
        #expect(!half.isOpen, "a server failing every other request is slow, not down: retries get through")

        var most = CircuitBreaker()
        var opened: String?
        for index in 0..<200 where opened == nil {
            opened = most.record(index % 3 == 0 ? .requestAnswered : .requestFailed)
        }
        // Two of every three fail: the 11th failure comes with the 17th request.
        #expect(opened == "11 of the last 17 requests failed")
    }

    @Test("a server failing every request opens it at the 11th: more than half of a whole window")
    func everyRequestFailing() {
        var breaker = CircuitBreaker()
        for _ in 0..<10 { breaker.record(.requestFailed) }
        #expect(!breaker.isOpen)
        #expect(breaker.record(.requestFailed) == "11 of the last 11 requests failed")
    }

    @Test("the window slides: old failures age out")
    func windowSlides() {
        var recovering = CircuitBreaker()
        for _ in 0..<10 { recovering.record(.requestAnswered) }
        for _ in 0..<10 { recovering.record(.requestFailed) }  // 10 of 20: not more than half
        #expect(!recovering.isOpen)
        for _ in 0..<20 { recovering.record(.requestAnswered) }  // the 10 failures age out of the window
        for _ in 0..<10 { recovering.record(.requestFailed) }  // 10 of 20 again, not 20 of 30
        #expect(!recovering.isOpen)
        #expect(recovering.record(.requestFailed) == "11 of the last 20 requests failed")
    }
}
