/// What ``BundleUploadState`` asks for and what it is told: the actions the uploader carries
/// out, where a bundle goes, and what the events that answer them say.
extension BundleUploadState {
    /// What the uploader does next.
    enum Action: Equatable {
        /// Check these references of the records not yet on the server against the server's lists
        /// (``ReferenceCatalog``), then ``referencesChecked(_:stopping:)``.
        case checkReferences([ReferenceUse])
        /// Commit these intents (the current step's first), then ``intentsRecorded(_:stopping:)``,
        /// or ``checkpointFailed()`` if the commit failed.
        case recordIntents([CheckpointStore.StepIntent])
        /// Look for the step on the server, in its session's tree, then ``looked(_:stopping:)``.
        case lookUp(UploadStep, LookUp)
        /// Record these steps, found on the server, as done (in plan order), then
        /// ``foundRecorded(_:stopping:)``, or ``checkpointFailed()``.
        case recordFound([FoundStep])
        /// Send the step, then ``answered(_:stopping:)``.
        case send(UploadStep, path: String)
        /// Read the credential again after the API refused it, then ``credentialRenewed(_:stopping:)``.
        case renewCredential
        /// The refusal of the step stands with the credential read again: ask the API something
        /// that needs only the token, then ``tokenChecked(_:stopping:)``.
        case checkToken(UploadStep)
        /// Wait before retry number `retry` of the step (`Retry-After` when the answer gave one),
        /// then ``backedOff(_:stopping:)``. `after`: the answer that is retried, for the log.
        case backOff(UploadStep, retry: Int, retryAfter: Duration?, after: StepResponse)
        /// Hand this result to the group commit, then ``resultHandedIn(_:stopping:)`` with its
        /// ticket. `found`: the
        /// step was found on the server instead of being sent.
        case handInResult(CheckpointStore.StepResult, found: Bool)
        /// Wait until the oldest result handed in and not settled, this ticket's, is committed,
        /// then ``settled(committed:stopping:)``.
        case settleResult(GroupCommit.Ticket)
        /// The bundle's work is over.
        case finish(Finish)
    }

    /// Where the bundle goes.
    enum Finish: Equatable {
        /// Every step is done and committed: to `done/`.
        case done
        /// To `failed/` with this reason. `stepAnswered`: the API answered the step (for the
        /// circuit breaker).
        case fail(BundleFailure, stepAnswered: Bool)
        /// Back to `incoming/` for a later attempt. `answered`: the API answered at all (an HTTP
        /// status), or not (unreachable).
        case deferBundle(BundleFailure, answered: Bool)
        /// Back to `incoming/` for a later attempt, for a fault of this machine (its disk, its
        /// file descriptors), not of the API: the circuit breaker does not hear of it.
        case deferLocally(BundleFailure)
        /// Back to `incoming/` uncounted.
        case giveBack(GiveBack)
    }

    enum GiveBack: Equatable {
        /// The run is stopping (signal, breaker, refused credentials elsewhere, `--max-time`).
        case stopping
        /// The API refused the credentials (401, 403): the whole run stops.
        case credentialsRefused(status: Int, message: String)
        /// The API's certificate cannot be trusted: the whole run stops.
        case apiNotTrusted(message: String)
        /// The answer says the API URL does not lead to the API (a redirect, HTML, a 404 from the
        /// session collection): the configuration's fault, never the bundle's; the whole run stops.
        case apiMisdirected(message: String)
        /// A checkpoint could not be recorded.
        case checkpointFailed
        /// The API refused the bundle's request (`status`) and could not say whether it takes the
        /// token: neither the bundle's fault nor, as far as known, the token's.
        case tokenUndecided(status: Int, message: String)
    }

    /// Where a look finds a step: the session's tree, by the session's client id (the session
    /// step, or any step before the session has a server id) or by its server id.
    enum LookUp: Equatable {
        case sessionByClientID(String)
        case sessionTree(serverID: Int64)
    }

    /// How a wait before a retry ended.
    enum BackOff: Equatable {
        case waited
        /// Not waited: the `Retry-After` asked for is longer than a slot may be held.
        case declined
        /// Cut short: the run is stopping.
        case cancelled
    }

    /// How a step's tries ended.
    enum Resolution: Equatable {
        /// The server's answer; `cutShort` when the run's stop ended the retries early.
        case response(StepResponse, cutShort: Bool)
        /// Found on the server (with this id) instead of being sent.
        case found(Int64)
        /// Found on the server with other content.
        case differs(BundleFailure)
    }

    /// What a look at the session's tree on the server asks to record.
    enum Reconciliation: Equatable {
        /// Nothing of the bundle there that has no checkpoint.
        case nothing
        /// These steps are there: record them as done (in plan order), then ``foundOnServer(_:)``.
        case found([FoundStep])
        /// One is there with other content.
        case differs(BundleFailure)
    }

    struct FoundStep: Equatable {
        let intent: CheckpointStore.StepIntent
        let serverID: Int64
    }
}
