import Foundation

/// `dopesync inspect BUNDLE [--json]`: validates a bundle without uploading and says what it holds.
public enum InspectCommand {
    /// - Parameter databasePath: the checkpoint database; when it exists and knows the session, the report
    ///   lists the steps done with their server ids. It is only read (a missing one is not created).
    public static func run(bundlePath: String, json: Bool, databasePath: String? = nil, limits: BundleLimits = .default)
        -> CommandOutcome
    {
        var report: BundleReport
        let status: ExitStatus
        do {
            report = BundleReport(try BundleInspector(limits: limits).inspect(path: bundlePath))
            status = .success
            if let databasePath, let sessionID = report.sessionID, FileManager.default.fileExists(atPath: databasePath)
            {
                // Best effort: a database that cannot be read does not make a valid bundle invalid.
                let steps = (try? CheckpointStore(path: databasePath).steps(sessionID: sessionID)) ?? []
                if !steps.isEmpty {
                    report.completedSteps = steps.compactMap { step in
                        guard step.state == .done, let serverID = step.serverID else { return nil }
                        return BundleReport.CompletedStep(step: step.stepKey, serverID: Int(serverID))
                    }
                }
            }
        } catch {
            report = BundleReport(error, limits: limits)
            status = .invalidData
        }
        return CommandOutcome(output: json ? report.json() : report.text(), status: status)
    }
}

/// `dopesync pack SESSION.json [--images DIR] (--output FILE | --spool DIR)`.
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
