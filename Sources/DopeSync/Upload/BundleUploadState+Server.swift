/// What the server says of the bundle before its steps are sent: its reference lists (docs/api.md,
/// "Reference lists") and its session's tree, when the session is already
/// there without a checkpoint.
extension BundleUploadState {
    /// What the server's lists said of the references: on to the first step, or where the bundle
    /// goes, at once (nothing is handed in before the first request).
    func afterReferences(_ check: ReferenceCatalog.Check, _ walk: inout Walk, stopping: Bool) -> Next {
        let onServer = plan.steps.count { walk.completed[$0.key] != nil }
        guard let finish = Self.finish(after: check, recordsOnServer: onServer, stopping: stopping) else {
            return advance(&walk, stopping: stopping)
        }
        return settleThen(.finish(finish), &walk)
    }

    /// Where the bundle goes after the reference check; nil: on to the first step. An unknown id
    /// fails the bundle before anything of it is sent; a list that could not be read is a failure
    /// of the API, never the bundle's.
    static func finish(after check: ReferenceCatalog.Check, recordsOnServer: Int, stopping: Bool) -> Finish? {
        switch check {
        case .passed:
            return nil
        case .unknown(let use):
            return .fail(use.unknownFailure(recordsOnServer: recordsOnServer), stepAnswered: false)
        case .listUnreadable(let list, let response):
            if stopping { return .giveBack(.stopping) }
            switch response {
            case .unauthorized(let status, let message):
                return .giveBack(.credentialsRefused(status: status, message: message))
            case .notTrusted(let message):
                return .giveBack(.apiNotTrusted(message: message))
            case .misdirected(let message):
                return .giveBack(.apiMisdirected(message: message))
            case .retryable(let status, _, let message):
                let failure = BundleFailure(
                    reason: status.map(FailureReason.http) ?? .unreachable, httpStatus: status,
                    message:
                        "the reference list GET \(list.path) could not be read before the first request: \(message)")
                return .deferBundle(failure, answered: status != nil)
            case .created, .rejected, .imageUnreadable, .bundleReadFailed:
                preconditionFailure("a list's read answers no create, and a refusal of it passes (\(response))")
            }
        }
    }

    /// The session is on the server although its step has no checkpoint (a new bundle of a session
    /// synced from elsewhere, a lost database, a crash before the session's result): which steps of
    /// the bundle without a checkpoint `tree` holds, in plan order, so that none is sent again.
    func reconciliation(with tree: ServerTree, _ walk: Walk) -> Reconciliation {
        var ids = walk.serverIDs
        var found: [FoundStep] = []
        for step in plan.steps where walk.completed[step.key] == nil {
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

    /// A record of `step` is on the server as `id` with `field` = `server`, the bundle saying `bundle`.
    /// A step this store recorded done whose record the bundle now says otherwise. The store keeps
    /// the record's digest, not its fields: the failure names the record (`field`: `dope[2]`) and
    /// where the server's copy is, for a person to compare.
    static func changedSinceUpload(_ step: UploadStep, _ done: CompletedStep, _ walk: Walk) -> BundleFailure {
        let copy = walk.serverIDs["session"].map { " (the session's tree: GET /api/sessions/\($0))" } ?? ""
        return BundleFailure(
            reason: .changedAfterUpload, step: step.key, field: step.recordPath.isEmpty ? nil : step.recordPath,
            message: "\(step.recordPath.isEmpty ? step.key : step.recordPath) was uploaded before as record "
                + "\(done.serverID) and differs from it in this bundle; the API is create-only, so nothing was sent "
                + "or overwritten: compare it with the server's copy\(copy) and put back the value the server has")
    }

    /// Names the field as the record's path and the member that differs (`dope[1].distance`).
    static func changedOnServer(_ step: UploadStep, id: Int64, field: String, server: String, bundle: String)
        -> BundleFailure
    {
        let path = step.recordPath.isEmpty ? field : "\(step.recordPath).\(field)"
        return BundleFailure(
            reason: .changedAfterUpload, step: step.key, field: path,
            message: "\(step.recordPath.isEmpty ? step.key : step.recordPath) is already on the server as record "
                + "\(id) with \(field) = \(server), but the bundle has \(bundle): the API is create-only, so nothing "
                + "was sent or overwritten")
    }
}
