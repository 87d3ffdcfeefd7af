import Foundation
import Logging

/// Where a claimed bundle goes once its upload is over, and what the checkpoint database and the
/// run's counters learn of it: `done/`, `failed/` with its sidecar, back to `incoming/` for a later
/// attempt (counted) or uncounted. Every move runs on NIO's blocking-work pool (a folder sync
/// waits for the disk); a move that cannot be made leaves the bundle in `processing/`, where the
/// next run takes it back. The uploader decides; this carries the decision out.
struct BundleDisposition: Sendable {
    let checkpoints: any CheckpointStorage
    let claims: any ClaimStorage
    /// When a deferred bundle is tried again, and when the worker gives up on it.
    let deferral: DeferralPolicy
    let counters: RunCounters
    /// The API's URL, for the message of a misdirected run (its password masked).
    let apiURL: String

    /// Moves the bundle where its upload ended, and tells the run's counters.
    func finish(
        _ claimed: ClaimedBundle, _ finish: BundleUploadState.Finish, sessionID: String, steps: Int, logger: Logger
    ) async -> UploadOutcome {
        switch finish {
        case .done:
            guard await mayMove(claimed) else { return await abandon(claimed, logger: logger) }
            do {
                let final = try await SpoolCalls.run { () throws(SpoolError) in try claimed.moveToDone() }
                await recordAfterMove(of: claimed.name, to: "done/\(final)", logger: logger) { [name = claimed.name] in
                    try await checkpoints.recordDone(name: name, sessionID: sessionID, finalName: final)
                }
                logger.info("bundle synced", metadata: ["steps": "\(steps)", "moved.to": "done/\(final)"])
                return .done
            } catch {
                // Stays in processing/, resumed (all steps done) by the next run.
                return await moveFailed(claimed, to: .done, error, logger: logger)
            }
        case .fail(let failure, let stepAnswered):
            if stepAnswered { counters.stepAnswered() }
            logger.warning(
                failure.reason == .unknownReference
                    ? "the bundle names an id the server's list does not hold: nothing of it is sent"
                    : "a step failed for good",
                metadata: [
                    "step": "\(failure.step ?? "-")", "reason": "\(failure.reason)",
                    "http.status": "\(failure.httpStatus.map(String.init) ?? "-")",
                    "field": "\(failure.field ?? "-")", "message": "\(failure.message ?? "")",
                ])
            return await fail(claimed, sessionID: sessionID, failure: failure, logger: logger)
        case .deferBundle(_, _) where !claims.holdsClaim(of: claimed.name),
            .deferLocally where !claims.holdsClaim(of: claimed.name):
            // Its last try was cut short because the claim ran out: not the API's fault.
            return await abandon(claimed, logger: logger)
        case .deferBundle(let failure, let answered):
            // No HTTP answer after every retry opens the breaker at once: the API is unreachable.
            if let reason = counters.stepKeptFailing(answered: answered) {
                logger.error(
                    "circuit breaker open: the run stops claiming and gives bundles back for later (exit 75)",
                    metadata: ["reason": "\(reason)"])
            }
            return await deferBundle(claimed, sessionID: sessionID, failure: failure, logger: logger)
        case .deferLocally(let failure):
            logger.error(
                "cannot read the bundle's image back: the bundle is deferred, not blamed",
                metadata: ["step": "\(failure.step ?? "-")", "message": "\(failure.message ?? "")"])
            return await deferBundle(claimed, sessionID: sessionID, failure: failure, logger: logger)
        case .giveBack(let why):
            if case .credentialsRefused(let status, let message) = why {
                logger.error(
                    "the API refused the credentials", metadata: ["http.status": "\(status)", "message": "\(message)"])
                counters.credentialsRefused()
            }
            if case .apiMisdirected(let message) = why, counters.report(\.apiMisdirected) {
                logger.error(
                    "the API URL does not lead to the API: the run stops and gives bundles back (exit 78)",
                    metadata: ["api.url": "\(MaskedURL.string(apiURL))", "message": "\(message)"])
            }
            if case .apiNotTrusted(let message) = why, counters.report(\.apiNotTrusted) {
                logger.error(
                    "the API cannot be trusted: the run stops and gives bundles back (exit 76)",
                    metadata: ["message": "\(message)"])
            }
            return await giveBack(claimed, logger: logger)
        }
    }

    func fail(_ claimed: ClaimedBundle, sessionID: String?, failure: BundleFailure, logger: Logger) async
        -> UploadOutcome
    {
        // Only for the sidecar's attempts and first-seen lines: a sidecar without them still says why.
        let state = try? await checkpoints.bundleState(name: claimed.name)
        let sidecar = ErrorSidecar(
            bundle: claimed.name, session: sessionID, failedAt: Date(), failure: failure,
            attempts: state?.attempts, firstSeen: state?.firstSeen
        )
        guard await mayMove(claimed) else { return await abandon(claimed, logger: logger) }
        do {
            let final = try await SpoolCalls.run { () throws(SpoolError) in try claimed.moveToFailed(sidecar) }
            await recordAfterMove(of: claimed.name, to: "failed/\(final)", logger: logger) { [name = claimed.name] in
                try await checkpoints.recordFailure(name: name, sessionID: sessionID, error: failure, finalName: final)
            }
            logger.warning("bundle failed", metadata: ["reason": "\(failure.reason)", "moved.to": "failed/\(final)"])
            return .failed(reason: failure.reason)
        } catch {
            return await moveFailed(claimed, to: .failed, error, logger: logger)
        }
    }

    func deferBundle(_ claimed: ClaimedBundle, sessionID: String?, failure: BundleFailure, logger: Logger) async
        -> UploadOutcome
    {
        do {
            let deferral = try await checkpoints.recordDeferral(
                name: claimed.name, sessionID: sessionID, error: failure, policy: deferral)
            if deferral.exhausted {
                // Not the last error's fault more than the others': the worker gave up on retrying.
                let last = "\(failure.reason)" + (failure.message.map { ": \($0)" } ?? "")
                // A refusal that the token's check showed to be this bundle's keeps its own reason:
                // it is not the API failing, and a person must look at the bundle.
                let refusedBundle = failure.reason == .http(401) || failure.reason == .http(403)
                let gaveUp = BundleFailure(
                    reason: refusedBundle ? failure.reason : .gaveUp, step: failure.step,
                    httpStatus: failure.httpStatus,
                    message:
                        "gave up after \(deferral.attempts) attempts over \(SpoolStatus.age(deferral.age)) "
                        + "(the limits: \(self.deferral.limitsText)); the last error: \(last)")
                return await fail(claimed, sessionID: sessionID, failure: gaveUp, logger: logger)
            }
            guard await mayMove(claimed) else { return await abandon(claimed, logger: logger) }
            let final = try await SpoolCalls.run { () throws(SpoolError) in
                try claimed.giveBack()
            }
            await recordAfterMove(of: claimed.name, to: "incoming/\(final)", logger: logger) { [name = claimed.name] in
                try await checkpoints.recordGivenBack(name: name, finalName: final, counted: true)
            }
            logger.info(
                "bundle deferred",
                metadata: [
                    "attempts": "\(deferral.attempts)", "next.attempt": "\(deferral.nextAttemptAt)",
                    "reason": "\(failure.reason)",
                ])
            return .deferred
        } catch let error as CheckpointError {
            // Nothing moved yet: the bundle goes back uncounted.
            checkpointFailed(error, logger: logger)
            return await giveBack(claimed, logger: logger)
        } catch {
            // The move back to incoming/ failed (its attempt is counted already).
            return await moveFailed(claimed, to: .incoming, error, logger: logger)
        }
    }

    /// Something else was put at `processing/NAME` after the claim (only the worker's own user, or
    /// root, can write there): it is not read, not moved and not blamed on a bundle; the claim
    /// ends and a person is told, once per run that finds it.
    func leaveReplaced(_ claimed: ClaimedBundle, _ why: String, logger: Logger) async -> UploadOutcome {
        logger.error(
            "a claimed bundle was replaced in processing/: what is there now is left alone for a person",
            metadata: ["error": "\(why)"])
        await claimed.release()
        return .returned
    }

    func giveBack(_ claimed: ClaimedBundle, logger: Logger) async -> UploadOutcome {
        guard await mayMove(claimed) else { return await abandon(claimed, logger: logger) }
        do {
            let final = try await SpoolCalls.run { () throws(SpoolError) in try claimed.giveBack() }
            // Only `status`'s "last outcome: returned"; the bundle itself is back in incoming/.
            try? await checkpoints.recordGivenBack(name: claimed.name, finalName: final, counted: false)
        } catch {
            // Stays in processing/; the next run takes it back as an orphan.
            return await moveFailed(claimed, to: .incoming, error, logger: logger)
        }
        return .returned
    }

    /// A move out of `processing/` failed: the bundle stays there, claimed by nobody, and the next
    /// run takes it back, so nothing is lost; but no run can finish it until a person fixes the
    /// spool, so the run exits 73 ("the spool cannot be written") instead of 0, and says which
    /// folder refused. When the folder refuses as such (``SpoolError/folderWideErrors``), every other bundle's
    /// move would fail too: the run stops claiming, as at the free-space floor. Any other error
    /// (a name the folder cannot take, say) is this bundle's, and the others go on.
    func moveFailed(_ claimed: ClaimedBundle, to folder: Spool.Folder, _ error: any Error, logger: Logger) async
        -> UploadOutcome
    {
        // Not the spool's fault: the claim ended, or `processing/NAME` is no longer the claimed
        // file (moved by another worker after this one's lease ran out, or replaced by hand).
        if let error = error as? SpoolError, error.code == .notClaimed {
            logger.error(
                "the bundle is no longer this worker's to move: left where it is",
                metadata: ["bundle.path": "processing/\(claimed.name)", "error": "\(error)"])
            await claimed.release()
            return .returned
        }
        let errno = (error as? SpoolError)?.errno
        let spoolWide = errno.map(SpoolError.folderWideErrors.contains) ?? false
        _ = counters.report(\.moveFailed)
        let stops = spoolWide && counters.report(\.spoolNotWritable)
        logger.critical(
            stops
                ? "cannot move a bundle to \(folder.rawValue)/: the spool cannot be written; the run stops claiming, leaves the bundle in processing/ for the next run, and exits 73"
                : "cannot move a bundle to \(folder.rawValue)/: it stays in processing/ for the next run; exit 73",
            metadata: ["bundle.path": "processing/\(claimed.name)", "error": "\(error)"])
        await claimed.release()
        return .returned
    }

    /// Whether the claim still allows a move: asked of the store just before it (a shared store
    /// checks the lease and renews it; the spool's flock always allows).
    private func mayMove(_ claimed: ClaimedBundle) async -> Bool {
        await claims.confirmClaim(of: claimed.name)
    }

    /// The claim's lease ran out (or the database cannot confirm it): another worker may hold the
    /// bundle now, so this one moves nothing and writes nothing more; the bundle stays where it
    /// is, for the worker that takes it over.
    func abandon(_ claimed: ClaimedBundle, logger: Logger) async -> UploadOutcome {
        // Not renewed because the database is gone: the run stops claiming and ends with 75.
        if checkpoints.isUnreachable {
            checkpointFailed(
                CheckpointError(code: .unreachable, message: "the claims could not be renewed"), logger: logger)
        }
        logger.error(
            "the claim on the bundle ran out, or the store could not confirm it, before it could be moved: it is left where it is for the worker that takes it over",
            metadata: ["bundle.path": "processing/\(claimed.name)"])
        await claimed.release()
        return .returned
    }

    /// Records in the checkpoint database what a move already did. The move cannot be undone, so a
    /// failure here leaves the database saying less than the folders (`status` would show the
    /// bundle where it no longer is): logged with where the bundle went, and the run stops with 73
    /// so that a person looks, as for any database that cannot be written.
    private func recordAfterMove(
        of name: String, to place: String, logger: Logger,
        _ record: () async throws -> Void
    ) async {
        do {
            try await record()
        } catch {
            logger.error(
                "the bundle moved but the checkpoint database could not record it",
                metadata: [
                    "moved.to": "\(place)", "error": "\(error)",
                ])
            if let error = error as? CheckpointError, error.isUnreachable || error.code == .leaseLost {
                // The shared database: unreachable is the run's 75; a claim lost since the move's
                // check changes nothing the next worker needs (the folder is the truth).
                if error.isUnreachable { checkpointFailed(error, logger: logger) }
            } else if counters.report(\.checkpointsFailed) {
                logger.critical(
                    "the checkpoint database cannot be written: the run stops claiming and gives bundles back (exit 73)",
                    metadata: ["error": "\(error)"])
            }
        }
    }

    /// Logs a checkpoint error; one of the database itself (``CheckpointError/isDatabaseFailure``)
    /// also stops the run: no bundle could be checkpointed, so they are given back, and exit 73.
    func checkpointFailed(_ error: CheckpointError, logger: Logger) {
        logger.error("checkpoint database error", metadata: ["error": "\(error)"])
        if error.isUnreachable, counters.report(\.databaseUnreachable) {
            logger.critical(
                "the shared checkpoint database cannot be reached: the run stops claiming, settles what it holds, and exits 75",
                metadata: ["error": "\(error)"])
        }
        if error.isDatabaseFailure, counters.report(\.checkpointsFailed) {
            logger.critical(
                "the checkpoint database cannot be written: the run stops claiming and gives bundles back (exit 73)",
                metadata: ["error": "\(error)"])
        }
    }
}
