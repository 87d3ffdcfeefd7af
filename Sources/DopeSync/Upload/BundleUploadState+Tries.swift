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
    /// Whether a retryable answer leaves open that the server did create the record (docs/api.md:
    /// no answer, a timeout, a 5xx, a 409 in flight, or a 2xx that did not confirm it), so the
    /// step is looked for before it is sent again. A 408, 425 or 429 says the request was not
    /// processed: a look would only cost a request.
    static func outcomeUnknown(status: Int?) -> Bool {
        guard let status else { return true }
        return ![408, 425, 429].contains(status)
    }

    // MARK: Rules

    /// The step's next try: a look first when `look` asks for one and there is somewhere to
    /// look, else the send.
    func nextTry(_ tries: Tries, look: Bool, _ walk: inout Walk, stopping: Bool) -> Next {
        let step = plan.steps[walk.index]
        if look {
            // The tree read for the steps left ambiguous by an earlier process serves each of
            // them once, for its first look: after a try in this run, only a fresh read can tell.
            let firstOfAmbiguousBefore = walk.ambiguousBefore.remove(step.key) != nil
            if step.kind == .session {
                return (
                    .looking(walk, tries, firstOfAmbiguousBefore: firstOfAmbiguousBefore),
                    .lookUp(step, .sessionByClientID(plan.sessionID))
                )
            }
            if firstOfAmbiguousBefore, let treeBefore = walk.treeBefore {
                return actOnLook(.tree(treeBefore), tries, firstOfAmbiguousBefore: true, &walk, stopping: stopping)
            }
            if let session = walk.serverIDs["session"] {
                return (
                    .looking(walk, tries, firstOfAmbiguousBefore: firstOfAmbiguousBefore),
                    .lookUp(step, .sessionTree(serverID: session))
                )
            }
        }
        return send(tries, walk)
    }

    /// The step's request, under its tries' path.
    private func send(_ tries: Tries, _ walk: Walk) -> Next {
        (.sending(walk, tries), .send(plan.steps[walk.index], path: tries.path))
    }

    func actOnLook(
        _ found: ServerLookup.Found, _ tries: Tries, firstOfAmbiguousBefore: Bool, _ walk: inout Walk, stopping: Bool
    ) -> Next {
        switch found {
        case .unavailable, .tree(nil), .failed(.rejected):
            // Not there, or the API cannot say (no lookups; a lookup refused as a request): the key must do.
            return send(tries, walk)
        case .failed(let response):
            return actOnAnswer(response, tries, &walk, stopping: stopping)
        case .tree(let tree?):
            let step = plan.steps[walk.index]
            if firstOfAmbiguousBefore && walk.treeBefore == nil { walk.treeBefore = tree }
            if step.kind == .session {
                switch reconciliation(with: tree, walk) {
                case .nothing: break
                case .differs(let failure): return settleThen(.act(on: .differs(failure)), &walk, stopping: stopping)
                case .found(let found): return (.recordingFound(walk, tries, tree: tree), .recordFound(found))
                }
            }
            return match(step, in: tree, tries, &walk, stopping: stopping)
        }
    }

    func match(_ step: UploadStep, in tree: ServerTree, _ tries: Tries, _ walk: inout Walk, stopping: Bool) -> Next {
        switch tree.match(step) {
        case .absent:
            return send(tries, walk)
        case .present(let id):
            return settleThen(.act(on: .found(id)), &walk, stopping: stopping)
        case .differs(let id, let field, let server, let bundle):
            let failure = Self.changedOnServer(step, id: id, field: field, server: server, bundle: bundle)
            return settleThen(.act(on: .differs(failure)), &walk, stopping: stopping)
        }
    }

    func actOnAnswer(_ response: StepResponse, _ tries: Tries, _ walk: inout Walk, stopping: Bool) -> Next {
        var tries = tries
        let step = plan.steps[walk.index]
        if case .unauthorized(let status, let message) = response, status != 407 {
            let refusal = Refusal(status: status, message: message)
            guard tries.renewedCredential else {
                tries.renewedCredential = true
                return (.renewingCredential(walk, tries, refusal: refusal), .renewCredential)
            }
            return (.checkingToken(walk, refusal: refusal), .checkToken(step))
        }
        guard case .retryable(let status, let retryAfter, _) = response else {
            return settleThen(.act(on: .response(response, cutShort: false)), &walk, stopping: stopping)
        }
        tries.retry += 1
        // The run is stopping first: a try cut short by the stop (its grace over) is not the
        // bundle's attempt, even if it was the step's last.
        guard !stopping else {
            return settleThen(.act(on: .response(response, cutShort: true)), &walk, stopping: stopping)
        }
        guard tries.retry < attemptsPerStep else {
            return settleThen(.act(on: .response(response, cutShort: false)), &walk, stopping: stopping)
        }
        let lookFirst = looksOnServer && Self.outcomeUnknown(status: status)
        return (
            .backingOff(walk, tries, last: response, lookFirst: lookFirst),
            .backOff(step, retry: tries.retry, retryAfter: retryAfter, after: response)
        )
    }

    /// The token was checked alone after the step's refusal stood: taken there, the refusal is
    /// the bundle's and it is deferred; refused there too, the run stops; no answer there, the
    /// bundle goes back uncounted.
    func afterTokenCheck(_ verdict: APIClient.TokenVerdict, _ refusal: Refusal, _ walk: inout Walk, stopping: Bool)
        -> Next
    {
        switch verdict {
        case .token:
            return settleThen(.act(on: .response(refusal.response, cutShort: false)), &walk, stopping: stopping)
        case .undecided(let why):
            return settleThen(
                .finish(.giveBack(.tokenUndecided(status: refusal.status, message: "\(refusal.message); \(why)"))),
                &walk, stopping: stopping)
        case .bundles:
            break
        }
        let step = plan.steps[walk.index]
        let failure = BundleFailure(
            reason: .http(refusal.status), step: step.key, httpStatus: refusal.status,
            message: "the API refused this bundle's request (\(refusal.status)) and took the same token for another: "
                + "the refusal is the bundle's (a firewall that blocks its content?): \(refusal.message)")
        return settleThen(.finish(.deferBundle(failure, answered: true)), &walk, stopping: stopping)
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
        case .bundleReadFailed(let message):
            return .deferLocally(
                BundleFailure(
                    reason: FailureReason(.io), step: step.key,
                    message: "the image could not be read back from the bundle, a fault of this machine, not of "
                        + "the bundle: \(message)"))
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
