/// The tries of one step: look on the server when its outcome may be known there, send, read
/// the credential again after a refusal, back off and try again (the failure table, docs/api.md), and
/// where the bundle goes when the last answer created nothing.
///
/// - A step is looked for before it is sent when its request may already have reached the
///   server: the session step always (its bundle may have been synced from elsewhere), a step an
///   earlier process left ambiguous, and every retry after an answer that leaves the outcome
///   unknown (no answer, a timeout, a 5xx, a 409 in flight, a 2xx that did not confirm the create).
///   A 408, 425 or 429 says the request was not processed: it is sent again without a look.
/// - Found there, the step is not sent: its server id is handed in as a result. Found with other
///   content, the bundle fails. A look that fails counts as a failed try; nothing is sent on a guess.
/// - A 401 or 403 (not a proxy's 407) is answered by reading the credential again, once per step;
///   a refusal is no outcome, so the send that follows needs no look. Refused again, or with no
///   other credential to try, the token is checked by a request that needs nothing else: if the
///   API takes it there, the refusal is this bundle's (a firewall that blocks its body, say): the
///   bundle is deferred, and the other bundles go on. Only a token refused there too stops the run.
extension BundleUploadState {
    /// The step's first try.
    mutating func beginTries(of step: UploadStep, path: String, lookFirst: Bool, stopping: Bool) -> Action {
        tries = Tries(path: path, mustLook: lookFirst && looksOnServer)
        return nextTry(stopping: stopping)
    }

    /// What a look found (``Action/lookUp(_:_:)``).
    mutating func looked(_ found: ServerLookup.Found, stopping: Bool) -> Action {
        precondition(phase == .looking, "looked only after lookUp")
        return actOnLook(found, stopping: stopping)
    }

    /// The steps of ``Action/recordFound(_:)`` were recorded as done.
    mutating func foundRecorded(_ recorded: [(stepKey: String, done: CompletedStep)], stopping: Bool) -> Action {
        guard case .recordingFound(let tree) = phase else {
            preconditionFailure("foundRecorded only after recordFound")
        }
        foundOnServer(recorded)
        return match(plan.steps[index], in: tree, stopping: stopping)
    }

    /// The API answered the step's request so (``Action/send(_:path:)``).
    mutating func answered(_ response: StepResponse, stopping: Bool) -> Action {
        precondition(phase == .sending, "answered only after send")
        return actOnAnswer(response, stopping: stopping)
    }

    /// Whether a credential other than the one refused could be read (``Action/renewCredential``).
    mutating func credentialRenewed(_ renewed: Bool, stopping: Bool) -> Action {
        guard phase == .renewingCredential, var tries, tries.last != nil else {
            preconditionFailure("credentialRenewed only after renewCredential")
        }
        guard renewed else {
            phase = .checkingToken
            return .checkToken
        }
        tries.mustLook = false
        self.tries = tries
        return nextTry(stopping: stopping)
    }

    /// Whether the API took the token for a request that needs nothing else (``Action/checkToken``).
    mutating func tokenChecked(_ accepted: Bool, stopping: Bool) -> Action {
        guard phase == .checkingToken, let refusal = tries?.last, case .unauthorized(let status, let message) = refusal
        else { preconditionFailure("tokenChecked only after checkToken, on a refusal") }
        guard accepted else { return settleThen(.act(on: .response(refusal, cutShort: false)), stopping: stopping) }
        let step = plan.steps[index]
        let failure = BundleFailure(
            reason: .http(status), step: step.key, httpStatus: status,
            message: "the API refused this bundle's request (\(status)) and took the same token for another: "
                + "the refusal is the bundle's (a firewall that blocks its content?): \(message)")
        return settleThen(.finish(.deferBundle(failure, answered: true)), stopping: stopping)
    }

    /// How the wait before a retry ended (``Action/backOff(_:retry:retryAfter:after:)``).
    mutating func backedOff(_ backOff: BackOff, stopping: Bool) -> Action {
        guard phase == .backingOff, let last = tries?.last else { preconditionFailure("backedOff only after backOff") }
        switch backOff {
        case .waited: return nextTry(stopping: stopping)
        case .declined: return settleThen(.act(on: .response(last, cutShort: false)), stopping: stopping)
        case .cancelled: return settleThen(.act(on: .response(last, cutShort: true)), stopping: stopping)
        }
    }

    /// Whether a retryable answer leaves open that the server did create the record (docs/api.md:
    /// no answer, a timeout, a 5xx, a 409 in flight, or a 2xx that did not confirm it), so the
    /// step is looked for before it is sent again. A 408, 425 or 429 says the request was not
    /// processed: a look would only cost a request.
    static func outcomeUnknown(status: Int?) -> Bool {
        guard let status else { return true }
        return ![408, 425, 429].contains(status)
    }

    // MARK: Rules

    /// A look first when one is due and there is somewhere to look, else the send.
    private mutating func nextTry(stopping: Bool) -> Action {
        guard var tries else { preconditionFailure("a try belongs to a step's tries") }
        let step = plan.steps[index]
        if tries.mustLook {
            // The tree read for the steps left ambiguous by an earlier process serves each of
            // them once, for its first look: after a try in this run, only a fresh read can tell.
            tries.firstLookOfAmbiguousBefore = ambiguousBefore.remove(step.key) != nil
            self.tries = tries
            if step.kind == .session {
                phase = .looking
                return .lookUp(step, .sessionByClientID(plan.sessionID))
            }
            if tries.firstLookOfAmbiguousBefore, let treeBefore {
                return actOnLook(.tree(treeBefore), stopping: stopping)
            }
            if let session = serverIDs["session"] {
                phase = .looking
                return .lookUp(step, .sessionTree(serverID: session))
            }
        }
        return send()
    }

    /// The current step's request, under its tries' path.
    private mutating func send() -> Action {
        guard let tries else { preconditionFailure("a send belongs to a step's tries") }
        phase = .sending
        return .send(plan.steps[index], path: tries.path)
    }

    private mutating func actOnLook(_ found: ServerLookup.Found, stopping: Bool) -> Action {
        switch found {
        case .unavailable, .tree(nil), .failed(.rejected):
            // Not there, or the API cannot say (no lookups; a lookup refused as a request): the key must do.
            return send()
        case .failed(let response):
            phase = .sending
            return actOnAnswer(response, stopping: stopping)
        case .tree(let tree?):
            let step = plan.steps[index]
            if tries?.firstLookOfAmbiguousBefore == true && treeBefore == nil { treeBefore = tree }
            if step.kind == .session {
                switch reconciliation(with: tree) {
                case .nothing: break
                case .differs(let failure): return settleThen(.act(on: .differs(failure)), stopping: stopping)
                case .found(let found):
                    phase = .recordingFound(tree)
                    return .recordFound(found)
                }
            }
            return match(step, in: tree, stopping: stopping)
        }
    }

    private mutating func match(_ step: UploadStep, in tree: ServerTree, stopping: Bool) -> Action {
        switch tree.match(step) {
        case .absent:
            return send()
        case .present(let id):
            return settleThen(.act(on: .found(id)), stopping: stopping)
        case .differs(let id, let field, let server, let bundle):
            let failure = Self.changedOnServer(step, id: id, field: field, server: server, bundle: bundle)
            return settleThen(.act(on: .differs(failure)), stopping: stopping)
        }
    }

    private mutating func actOnAnswer(_ response: StepResponse, stopping: Bool) -> Action {
        guard var tries else { preconditionFailure("an answer belongs to a step's tries") }
        tries.last = response
        if case .unauthorized(let status, _) = response, status != 407 {
            self.tries = tries
            guard tries.renewedCredential else {
                self.tries?.renewedCredential = true
                phase = .renewingCredential
                return .renewCredential
            }
            phase = .checkingToken
            return .checkToken
        }
        guard case .retryable(let status, let retryAfter, _) = response else {
            return settleThen(.act(on: .response(response, cutShort: false)), stopping: stopping)
        }
        tries.mustLook = looksOnServer && Self.outcomeUnknown(status: status)
        tries.retry += 1
        self.tries = tries
        // The run is stopping first: a try cut short by the stop (its grace over) is not the
        // bundle's attempt, even if it was the step's last.
        guard !stopping else { return settleThen(.act(on: .response(response, cutShort: true)), stopping: stopping) }
        guard tries.retry < attemptsPerStep else {
            return settleThen(.act(on: .response(response, cutShort: false)), stopping: stopping)
        }
        phase = .backingOff
        return .backOff(plan.steps[index], retry: tries.retry, retryAfter: retryAfter, after: response)
    }

    /// Where the bundle goes after `step`'s last answer, when it did not create the record.
    static func finish(_ step: UploadStep, after response: StepResponse, cutShort: Bool) -> Finish {
        switch response {
        case .created:
            preconditionFailure("a created step goes on")
        case .rejected(404, _, let message, _) where step.kind == .session:
            // The session collection itself is not there: the URL is wrong, not the bundle. (A 404
            // under a record the worker created is the bundle's, below.)
            return .giveBack(
                .apiMisdirected(
                    message: "the session collection answered 404 (\(message)): the API URL does not lead to the API"))
        case .misdirected(let message):
            return .giveBack(.apiMisdirected(message: message))
        case .rejected(let status, _, let message, let field):
            // The API names its request's field; the sidecar names the bundle's (`dope[2].ammunitionId`).
            let failure = BundleFailure(
                reason: .http(status), step: step.key, httpStatus: status,
                field: field.map { "\(step.recordPath).\($0)" }, message: message)
            return .fail(failure, stepAnswered: true)
        case .imageUnreadable(let message):
            return .fail(
                BundleFailure(reason: .changedAfterValidation, step: step.key, message: message), stepAnswered: false)
        case .unauthorized(let status, let message):
            return .giveBack(.credentialsRefused(status: status, message: message))
        case .notTrusted(let message):
            return .giveBack(.apiNotTrusted(message: message))
        case .retryable(let status, _, let message):
            // Retries cut short because the run is stopping: not this bundle's attempt.
            if cutShort { return .giveBack(.stopping) }
            // A 2xx here did not confirm the create (no id, or another clientId): not the API's
            // refusal either, so it has a reason of its own.
            let reason: FailureReason =
                switch status {
                case nil: .unreachable
                case let status? where (200..<300).contains(status): .unconfirmedCreate
                case let status?: .http(status)
                }
            let failure = BundleFailure(reason: reason, step: step.key, httpStatus: status, message: message)
            return .deferBundle(failure, answered: status != nil)
        }
    }
}
