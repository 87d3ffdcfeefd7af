import Foundation

/// `inspect BUNDLE [--json]`, of `dopesync` and `dopesync-bundle`: validates a bundle without
/// uploading and says what it holds.
public enum InspectCommand {
    /// Runs `body` with a checkpoint ledger it opens, and closes it after: where the progress of a
    /// valid bundle is read when not from the spool's file. A ledger that cannot be opened is
    /// no progress (`body` does not run): a valid bundle stays valid.
    public typealias LedgerScope = (_ body: (any CheckpointLedger) async -> Void) async -> Void

    /// - Parameters:
    ///   - databasePath: the spool's checkpoint database; when it exists and knows the session, the
    ///     report lists the steps done with their server ids. It is only read (a missing one is not created).
    ///   - ledger: the ledger to read instead (`dopesync inspect --database`: the database the
    ///     spool's hosts share), opened only once the bundle is known valid.
    public static func run(
        bundlePath: String, json: Bool, databasePath: String? = nil, ledger: LedgerScope? = nil,
        limits: BundleLimits = .default
    ) async -> CommandOutcome {
        var report: BundleReport
        let status: ExitStatus
        var note: String? = nil
        do {
            let bundle = try BundleInspector(limits: limits).inspect(path: bundlePath)
            report = BundleReport(bundle)
            status = .success
            // Best effort, and only read (a private copy): a database that cannot be read does
            // not make a valid bundle invalid.
            if let plan = try? UploadPlan(session: bundle.session, images: bundle.images) {
                if let ledger {
                    await ledger { await addCheckpoints(of: plan, from: $0, to: &report) }
                } else if let databasePath, FileManager.default.fileExists(atPath: databasePath),
                    let store = try? CheckpointStore(readingSnapshotOf: databasePath)
                {
                    // A file `migrate` retired holds the checkpoints as they were then, not now.
                    if let movedTo = try? store.movedTo() {
                        note =
                            "note: \(databasePath) was migrated to \(movedTo); its checkpoints are not shown "
                            + "(add --database \(movedTo) to see them)"
                    } else {
                        await addCheckpoints(of: plan, from: store, to: &report)
                    }
                }
            }
        } catch {
            report = BundleReport(error, limits: limits)
            status = .invalidData
        }
        return CommandOutcome(output: json ? report.json() : report.text(), diagnostics: note, status: status)
    }

    /// The steps the store holds done for the plan's session, and the ids of the steps still to
    /// send that the kept reference lists lack.
    private static func addCheckpoints(
        of plan: UploadPlan, from ledger: any CheckpointLedger, to report: inout BundleReport
    ) async {
        let steps = (try? await ledger.steps(sessionID: plan.sessionID)) ?? []
        let done = steps.filter { $0.state == .done && $0.serverID != nil }
        if !steps.isEmpty {
            report.completedSteps = done.map {
                BundleReport.CompletedStep(step: $0.stepKey, serverID: Int($0.serverID ?? 0))
            }
        }
        let doneKeys = Set(done.map(\.stepKey))
        let pending = plan.steps.filter { !doneKeys.contains($0.key) }.flatMap(\.references)
        report.references = (try? await ledger.cachedReferenceIDs()).map { ids in
            BundleReport.References(
                listsKept: ReferenceList.allCases.filter { ids.holdsList(of: $0.kinds[0]) }.map(\.rawValue),
                unknown: ids.unknown(in: pending).map {
                    .init(field: $0.field, kind: $0.kind.noun, id: $0.id)
                })
        }
    }
}

/// `pack SESSION.json [--images DIR] (--output FILE | --spool DIR)`, of `dopesync` and
/// `dopesync-bundle`.
public enum PackCommand {
    public static func run(
        sessionFile: String,
        imagesDirectory: String?,
        destination: BundlePacker.Destination,
        limits: BundleLimits = .default
    ) -> CommandOutcome {
        do {
            let path = try BundlePacker(limits: limits).pack(
                sessionFile: sessionFile, imagesDirectory: imagesDirectory, destination: destination)
            return CommandOutcome(output: "packed \(path)", status: .success)
        } catch let error as BundleValidationError {
            let reasons = error.errors.map { "  [\($0.code)] \($0.description)" }.joined(separator: "\n")
            return CommandOutcome(
                output: "", diagnostics: "\(sessionFile): cannot pack, \(error.errors.count) problem(s):\n\(reasons)",
                status: .invalidData)
        } catch {
            // Anything else is the destination: the file or the spool could not be written.
            return CommandOutcome(output: "", diagnostics: "cannot write the bundle: \(error)", status: .cannotCreate)
        }
    }
}
