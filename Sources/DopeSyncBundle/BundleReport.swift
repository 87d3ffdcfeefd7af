import DopeSyncSupport
import Foundation

/// What `dopesync inspect` says about a bundle: a summary if it is valid, every reason if not.
/// The same content renders as text for a person and as one JSON document for a program.
public struct BundleReport: Sendable, Codable {
    public struct Counts: Sendable, Codable, Equatable {
        public var dopeEntries = 0
        public var chronoSessions = 0
        public var velocityReadings = 0
        public var groups = 0
        public var measurements = 0
        public var images = 0
        /// Upload requests (steps) the bundle makes: one per record and per image.
        public var requests = 0
    }
    public struct Image: Sendable, Codable, Equatable {
        public var fileName: String
        public var type: String
        public var contentType: String
        public var size: Int64
        public var sha256: String
    }
    public struct Problem: Sendable, Codable, Equatable {
        public var code: String
        public var culprit: String
        public var message: String
    }
    public struct Limits: Sendable, Codable, Equatable {
        public var maxEntries: Int
        public var maxTotalBytes: Int64
        public var maxSessionBytes: Int64
        public var maxCompressionRatio: Double
        public var ratioCheckAfterBytes: Int64
        /// The time budget: this many seconds plus one per `readingBytesPerSecond` of file.
        public var readingSeconds: Double
        public var readingBytesPerSecond: Int64
    }
    /// A completed upload step, when the checkpoint database knows the session.
    public struct CompletedStep: Sendable, Codable, Equatable {
        public var step: String
        public var serverID: Int

        package init(step: String, serverID: Int) {
            self.step = step
            self.serverID = serverID
        }
    }

    /// What the server's reference lists, as the last run kept them, say of the bundle's ids.
    public struct References: Sendable, Codable, Equatable {
        public struct Unknown: Sendable, Codable, Equatable {
            /// As a failure's `field` names it: `dope[2].ammunitionId`.
            public var field: String
            public var kind: String
            public var id: Int64

            package init(field: String, kind: String, id: Int64) {
                (self.field, self.kind, self.id) = (field, kind, id)
            }
        }
        /// The lists kept (`rifles`, `ammunition`, `locations`); empty when no run has read any.
        public var listsKept: [String]
        /// The ids of records not yet on the server that a kept list does not hold.
        public var unknown: [Unknown]

        package init(listsKept: [String], unknown: [Unknown]) {
            (self.listsKept, self.unknown) = (listsKept, unknown)
        }
    }

    public var bundle: String
    public var valid: Bool
    public var container: String?
    public var compression: [String]?
    public var sessionID: String?
    public var sessionDate: String?
    public var counts: Counts?
    public var images: [Image]?
    public var ignoredFiles: [String]?
    public var hasManifest: Bool?
    public var unpackedBytes: Int64?
    public var problems: [Problem]
    public var limits: Limits
    /// Filled in by the caller when a checkpoint database is at hand.
    public var completedSteps: [CompletedStep]?
    /// Filled in by the caller when a checkpoint database is at hand.
    public var references: References?

    public init(_ bundle: ValidatedBundle) {
        let session = bundle.session.session
        var counts = Counts()
        counts.dopeEntries = session.dopeEntries.count
        counts.chronoSessions = session.chronoSessions.count
        counts.velocityReadings = session.chronoSessions.reduce(0) { $0 + $1.velocityReadings.count }
        counts.groups = session.groupEntries.count
        counts.measurements = session.groupEntries.filter { $0.measurement != nil }.count
        counts.images = bundle.session.imageReferences.count
        counts.requests =
            1 + counts.dopeEntries + counts.chronoSessions + counts.velocityReadings
            + counts.groups + counts.measurements + counts.images
        self.bundle = bundle.path
        valid = true
        container = bundle.container
        compression = bundle.filters
        sessionID = session.id
        sessionDate = session.sessionDate
        self.counts = counts
        images = bundle.session.imageReferences.compactMap { reference in
            bundle.images[reference.fileName].map {
                Image(
                    fileName: $0.fileName, type: $0.type.rawValue, contentType: $0.type.contentType, size: $0.size,
                    sha256: $0.sha256)
            }
        }
        ignoredFiles = bundle.ignoredFiles
        hasManifest = bundle.hasManifest
        unpackedBytes = bundle.unpackedBytes
        problems = []
        limits = Limits(bundle.limits)
    }

    public init(_ error: BundleValidationError, limits: BundleLimits) {
        bundle = error.bundle
        valid = false
        problems = error.errors.map { Problem(code: $0.code.description, culprit: $0.culprit, message: $0.message) }
        self.limits = Limits(limits)
    }

    /// One JSON document, keys sorted.
    public func json() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        // Force-try: every field is a plain string, number, bool or array of them.
        return String(decoding: try! encoder.encode(self), as: UTF8.self)
    }

    /// The report for a person.
    public func text() -> String {
        var lines: [String] = []
        if valid, let counts, let sessionID {
            lines.append("\(bundle): valid bundle")
            lines.append("  session      \(sessionID), \(sessionDate ?? "?")")
            lines.append(
                "  container    \(container ?? "?")\(compression.map { $0.isEmpty ? "" : ", " + $0.joined(separator: " + ") } ?? "")\(hasManifest == true ? ", with manifest" : ", no manifest")"
            )
            lines.append(
                "  records      \(counts.dopeEntries) DOPE entries, \(counts.chronoSessions) chrono sessions (\(counts.velocityReadings) velocity readings), \(counts.groups) groups (\(counts.measurements) with a measurement)"
            )
            lines.append(
                "  images       \(counts.images)\(unpackedBytes.map { ", \(ByteCount($0)) unpacked in all" } ?? "")")
            for image in images ?? [] {
                lines.append("    \(image.fileName)  \(image.type)  \(ByteCount(image.size)) (\(image.size) bytes)")
            }
            lines.append("  requests     \(counts.requests) upload steps")
            if let ignoredFiles, !ignoredFiles.isEmpty {
                lines.append("  ignored      \(ignoredFiles.count) file(s) not used by any record:")
                lines += ignoredFiles.map { "    \($0)" }
            }
            if let completedSteps {
                lines.append("  checkpoints  \(completedSteps.count) of \(counts.requests) steps done")
                lines += completedSteps.map { "    \($0.step) → server id \($0.serverID)" }
            }
            if let references { lines += references.lines }
        } else {
            lines.append("\(bundle): invalid bundle, \(problems.count) problem\(problems.count == 1 ? "" : "s"):")
            lines += problems.map { "  [\($0.code)] \($0.culprit): \($0.message)" }
        }
        lines.append(
            "  limits       \(limits.maxEntries) entries, \(ByteCount(limits.maxTotalBytes)) unpacked, \(ByteCount(limits.maxSessionBytes)) for session.json, ratio \(Int(limits.maxCompressionRatio)):1 checked after \(ByteCount(limits.ratioCheckAfterBytes))"
        )
        lines.append(
            "  budget       one compression filter; \(Int(limits.readingSeconds)) s + 1 s per \(ByteCount(limits.readingBytesPerSecond)) of file to read it; "
                + "memory: 64 KiB reads, session.json's limit, 1 MiB of small images kept")
        return lines.joined(separator: "\n")
    }
}

extension BundleReport.References {
    var lines: [String] {
        guard !listsKept.isEmpty else {
            return ["  references   not checked: no run has kept the server's reference lists yet"]
        }
        let kept = "the server's lists as the last run kept them (\(listsKept.joined(separator: ", ")))"
        guard !unknown.isEmpty else { return ["  references   every id is in \(kept)"] }
        return ["  references   \(unknown.count) id\(unknown.count == 1 ? "" : "s") not in \(kept):"]
            + unknown.map { "    \($0.field)  \($0.kind) \($0.id)" }
    }
}

extension BundleReport.Limits {
    init(_ limits: BundleLimits) {
        self.init(
            maxEntries: limits.maxEntries, maxTotalBytes: limits.maxTotalBytes, maxSessionBytes: limits.maxSessionBytes,
            maxCompressionRatio: limits.maxCompressionRatio, ratioCheckAfterBytes: limits.ratioCheckAfterBytes,
            readingSeconds: limits.readingSeconds, readingBytesPerSecond: limits.readingBytesPerSecond
        )
    }
}
