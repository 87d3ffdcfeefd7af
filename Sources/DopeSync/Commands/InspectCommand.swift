/// `dopesync inspect BUNDLE [--json]`: validates a bundle without uploading and says what it holds.
public enum InspectCommand {
    public static func run(bundlePath: String, json: Bool, limits: BundleLimits = .default) -> CommandOutcome {
        let report: BundleReport
        let status: ExitStatus
        do {
            report = BundleReport(try BundleInspector(limits: limits).inspect(path: bundlePath))
            status = .success
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
            let path = try BundlePacker(limits: limits).pack(sessionFile: sessionFile, imagesDirectory: imagesDirectory, destination: destination)
            return CommandOutcome(output: "packed \(path)", status: .success)
        } catch let error as BundleValidationError {
            let reasons = error.errors.map { "  [\($0.code)] \($0.description)" }.joined(separator: "\n")
            return CommandOutcome(output: "", diagnostics: "\(sessionFile): cannot pack, \(error.errors.count) problem(s):\n\(reasons)", status: .invalidData)
        } catch {
            // Anything else is the destination: the file or the spool could not be written.
            return CommandOutcome(output: "", diagnostics: "cannot write the bundle: \(error)", status: .cannotCreate)
        }
    }
}
