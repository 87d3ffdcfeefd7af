/// What the server says of the bundle before its steps are sent: its reference lists (docs/api.md,
/// "Reference lists") and its session's tree, when the session is already
/// there without a checkpoint.
extension BundleUploadState {
    /// What the server's lists said of the references: on to the first step, or where the bundle
    /// goes. An unknown id fails the bundle before anything of it is sent; a list that could not
    /// be read is a failure of the API, never the bundle's.
    mutating func referencesChecked(_ check: ReferenceCatalog.Check, stopping: Bool) -> Action {
        precondition(phase == .checkingReferences, "references checked only after checkReferences")
        phase = .stepping
        switch check {
        case .passed:
            return advance(stopping: stopping)
        case .unknown(let use):
            return finish(.fail(use.unknownFailure, stepAnswered: false))
        case .listUnreadable(let list, let response):
            if stopping { return finish(.giveBack(.stopping)) }
            switch response {
            case .unauthorized(let status, let message):
                return finish(.giveBack(.credentialsRefused(status: status, message: message)))
            case .notTrusted(let message):
                return finish(.giveBack(.apiNotTrusted(message: message)))
            case .misdirected(let message):
                return finish(.giveBack(.apiMisdirected(message: message)))
            case .retryable(let status, _, let message):
                let failure = BundleFailure(
                    reason: status.map(FailureReason.http) ?? .unreachable, httpStatus: status,
                    message:
                        "the reference list GET \(list.path) could not be read before the first request: \(message)")
                return finish(.deferBundle(failure, answered: status != nil))
            case .created, .rejected, .imageUnreadable:
                preconditionFailure("a list's read answers no create, and a refusal of it passes (\(response))")
            }
        }
    }

    /// The session is on the server although its step has no checkpoint (a new bundle of a session
    /// synced from elsewhere, a lost database, a crash before the session's result): which steps of
    /// the bundle without a checkpoint `tree` holds, in plan order, so that none is sent again.
    func reconciliation(with tree: ServerTree) -> Reconciliation {
        var ids = serverIDs
        var found: [FoundStep] = []
        for step in plan.steps where completed[step.key] == nil {
            switch tree.match(step) {
            case .absent: continue
            case .differs(let id, let field, let server, let bundle):
                return .differs(Self.changedOnServer(step, id: id, field: field, server: server, bundle: bundle))
            case .present(let id):
                guard step.path(serverIDs: ids) != nil else { continue }  // a child whose parent is not there
                ids[step.key] = id
                found.append(FoundStep(intent: intent(of: step), serverID: id))
            }
        }
        return found.isEmpty ? .nothing : .found(found)
    }

    /// The steps of a ``Reconciliation/found(_:)`` were recorded as done.
    mutating func foundOnServer(_ recorded: [(stepKey: String, done: CompletedStep)]) {
        for (key, done) in recorded { completed[key] = done }
        intentsCommitted.formUnion(recorded.map(\.stepKey))
    }

    /// A record of `step` is on the server as `id` with `field` = `server`, the bundle saying `bundle`.
    static func changedOnServer(_ step: UploadStep, id: Int64, field: String, server: String, bundle: String)
        -> BundleFailure
    {
        BundleFailure(
            reason: .changedAfterUpload, step: step.key,
            message: "already on the server as record \(id) with \(field) = \(server), but the bundle has \(bundle): "
                + "the API is create-only, so nothing was sent or overwritten")
    }
}
