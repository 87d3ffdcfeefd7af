import DopeSyncSupport
import Foundation

/// One image a record names, found in the bundle and recognised by its bytes.
public struct BundleImage: Sendable, Hashable {
    /// The plain file name the records use.
    public var fileName: String
    /// The entry's full path inside the archive (the root folder included), for streaming it.
    public var entryPath: String
    public var size: Int64
    public var sha256: String
    public var type: ImageType
    /// The entry's position in the archive, counting every entry (``ScannedFile/ordinal``).
    var ordinal: Int
    /// Whether its bytes hold ``MultipartFraming/boundaryMarker`` (``ScannedFile/holdsBoundaryMarker``).
    package var holdsBoundaryMarker = false
    /// The validated bytes themselves, when the image is small enough to keep from validation
    /// (``ArchiveScan/retainedFileLimit``); nil when it is streamed from the archive.
    package var bytes: [UInt8]?

    package init(
        fileName: String, entryPath: String, size: Int64, sha256: String, type: ImageType, ordinal: Int,
        bytes: [UInt8]? = nil
    ) {
        self.fileName = fileName
        self.entryPath = entryPath
        self.size = size
        self.sha256 = sha256
        self.type = type
        self.ordinal = ordinal
        self.bytes = bytes
    }
}

/// Which file a path named when it was claimed: a device and an inode.
public struct FileIdentity: Sendable, Hashable {
    public var device: UInt64
    public var inode: UInt64
    public init(device: UInt64, inode: UInt64) {
        self.device = device
        self.inode = inode
    }
}

/// A bundle that passed every check of docs/bundle-format.md: what it holds and where.
public struct ValidatedBundle: Sendable {
    /// The bundle file.
    public var path: String
    /// The file that was read, when it had to be that one (a claimed bundle): every later read
    /// of its images checks that `path` still names it.
    public var identity: FileIdentity?
    /// The container as libarchive names it, and the compression filters.
    public var container: String
    public var filters: [String]
    /// The folder that holds `session.json` (empty for the archive's top), with a trailing `/`.
    public var root: String
    public var session: SessionDocument
    /// SHA-256 of `session.json` as stored in the bundle.
    public var sessionSHA256: String
    /// The images the records name, by file name.
    public var images: [String: BundleImage]
    /// Files the bundle holds that no rule uses, reported by `inspect`, never uploaded.
    public var ignoredFiles: [String]
    public var hasManifest: Bool
    public var unpackedBytes: Int64
    public var compressedBytes: Int64
    public var limits: BundleLimits
}

/// Reads a bundle once, streaming, and applies every rule of docs/bundle-format.md.
///
/// Memory stays bounded by a read buffer plus `session.json`, whatever the images weigh.
public struct BundleInspector: Sendable {
    public var limits: BundleLimits

    public init(limits: BundleLimits = .default) {
        self.limits = limits
    }

    /// Validates the bundle at `path`; throws every reason it is unacceptable. The reading has a
    /// time budget (``BundleLimits/readingTime(forFileOfSize:)``) and ends early, with
    /// ``BundleError/Code/readingStopped``, once `stop` is requested.
    ///
    /// With `expected` (a claimed bundle), only that very file is read: a symlink, a FIFO or another
    /// file put at `path` since the claim fails with ``BundleError/Code/replacedAfterClaim``.
    public func inspect(path: String, expected: FileIdentity? = nil, stop: StopRequest? = nil)
        throws(BundleValidationError) -> ValidatedBundle
    {
        let scan: ArchiveScan
        do {
            let size = FileSystem.size(ofPath: path) ?? 0
            let budget = ReadBudget(time: limits.readingTime(forFileOfSize: size), stop: stop)
            scan = try ArchiveScan.scan(path: path, expected: expected, limits: limits, budget: budget)
        } catch {
            throw BundleValidationError(bundle: path, errors: [error])
        }
        var errors = scan.errors

        guard let root = Self.root(of: scan) else {
            errors.append(
                BundleError(
                    .missingSession, culprit: "session.json",
                    message: "no session.json at the archive's top, nor in a single top-level folder"
                ))
            throw BundleValidationError(bundle: path, errors: errors)
        }
        let filesByPath = Dictionary(scan.files.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
        let sessionPath = root + "session.json"
        let sessionBytes = scan.buffered[sessionPath]

        var session: SessionDocument?
        switch sessionBytes.map({ SessionValidator.validate($0, maxBytes: Int(limits.maxSessionBytes)) }) {
        case .success(let document)?: session = document
        case .failure(let failure)?:
            errors += failure.issues.map { BundleError(.invalidSession, culprit: $0.culprit, message: $0.message) }
        case nil: break  // already reported as too large
        }

        let images = Self.images(named: session, root: root, scan: scan, files: filesByPath, errors: &errors)

        let manifestPath = root + "manifest.json"
        let hasManifest = filesByPath[manifestPath] != nil
        if let manifestBytes = scan.buffered[manifestPath] {
            errors += BundleManifest.check(manifestBytes, root: root, files: filesByPath)
        }

        if !errors.isEmpty { throw BundleValidationError(bundle: path, errors: errors) }
        guard let session, let sessionFile = filesByPath[sessionPath] else {
            // Unreachable: a missing or invalid session always adds an error above.
            throw BundleValidationError(
                bundle: path, errors: [BundleError(.missingSession, culprit: sessionPath, message: "could not be read")]
            )
        }

        let used = Set([sessionPath, manifestPath] + images.values.map(\.entryPath))
        return ValidatedBundle(
            path: path, identity: expected, container: scan.container, filters: scan.filters, root: root,
            session: session, sessionSHA256: sessionFile.sha256, images: images,
            ignoredFiles: scan.files.map(\.path).filter { !used.contains($0) }, hasManifest: hasManifest,
            unpackedBytes: scan.unpackedBytes, compressedBytes: scan.compressedBytes, limits: limits)
    }

    /// The images the records name: present, and recognised by their bytes; a problem of each
    /// is added to `errors`.
    private static func images(
        named session: SessionDocument?, root: String, scan: ArchiveScan, files filesByPath: [String: ScannedFile],
        errors: inout [BundleError]
    ) -> [String: BundleImage] {
        var images: [String: BundleImage] = [:]
        for reference in session?.imageReferences ?? [] where images[reference.fileName] == nil {
            let entryPath = root + "images/" + reference.fileName
            guard let file = filesByPath[entryPath] else {
                errors.append(
                    BundleError(
                        .missingImage, culprit: reference.fieldPath,
                        message: "names images/\(reference.fileName), which the bundle does not hold"
                    ))
                continue
            }
            guard let type = ImageType(sniffing: file.prefix) else {
                errors.append(
                    BundleError(
                        .unsupportedImageType, culprit: "images/\(reference.fileName)",
                        message: "not a JPEG, PNG, HEIC or WebP image (first bytes: \(file.prefix.prefix(8).hexString))"
                    ))
                continue
            }
            var image = BundleImage(
                fileName: reference.fileName, entryPath: entryPath, size: file.size,
                sha256: file.sha256, type: type, ordinal: file.ordinal, bytes: scan.retained[entryPath]
            )
            image.holdsBoundaryMarker = file.holdsBoundaryMarker
            images[reference.fileName] = image
        }

        return images
    }

    /// The bundle's root: the top if it has `session.json`; else the single top-level folder
    /// that every entry lies under, if it holds `session.json` (`tar czf s.tgz mysession/`).
    static func root(of scan: ArchiveScan) -> String? {
        let paths = scan.files.map(\.path)
        if paths.contains("session.json") { return "" }
        let tops = Set((paths + scan.directories).compactMap { $0.split(separator: "/").first.map(String.init) })
        guard tops.count == 1, let top = tops.first,
            paths.allSatisfy({ $0.hasPrefix(top + "/") }),
            paths.contains(top + "/session.json")
        else { return nil }
        return top + "/"
    }
}

/// `manifest.json`: every listed file exists with exactly that size and SHA-256. Read with the
/// same strict parser as `session.json` (duplicate keys refused), each problem naming its key.
enum BundleManifest {
    /// One listed file, as the manifest states it.
    struct Listed {
        let name: String
        let size: Int64
        let sha256: String
    }

    static func check(_ bytes: [UInt8], root: String, files: [String: ScannedFile]) -> [BundleError] {
        let listed: [Listed]
        switch read(bytes) {
        case .success(let entries): listed = entries
        case .failure(let error): return [error]
        }
        var errors: [BundleError] = []
        for expected in listed.sorted(by: { $0.name < $1.name }) {
            let name = expected.name
            guard let file = files[root + (EntryPath.normalise(name).successValue ?? name)] else {
                errors.append(
                    BundleError(
                        .manifestMismatch, culprit: name, message: "listed in manifest.json but not in the bundle"))
                continue
            }
            if file.size != expected.size {
                errors.append(
                    BundleError(
                        .manifestMismatch, culprit: name,
                        message: "size is \(file.size) bytes, manifest.json says \(expected.size)"))
            } else if file.sha256 != expected.sha256.lowercased() {
                errors.append(
                    BundleError(
                        .manifestMismatch, culprit: name,
                        message: "SHA-256 is \(file.sha256), manifest.json says \(expected.sha256)"))
            }
        }
        return errors
    }

    /// The files a manifest lists, or why it cannot be read.
    static func read(_ bytes: [UInt8]) -> Result<[Listed], BundleError> {
        func invalid(_ message: String) -> Result<[Listed], BundleError> {
            .failure(
                BundleError(.manifestInvalid, culprit: "manifest.json", message: "not a valid manifest: \(message)"))
        }
        let document: JSONValue
        do {
            document = try JSONValue.parse(bytes)
        } catch {
            return invalid("\(error)")
        }
        guard let object = document.objectValue else { return invalid("not a JSON object") }
        // The version first, so a future format is refused for that reason, not as "malformed".
        guard let versionValue = object["version"] else { return invalid("missing version") }
        guard let version = versionValue.numberValue?.intValue else { return invalid("version: wrong type") }
        guard version == 1 else {
            return .failure(
                BundleError(
                    .manifestVersion, culprit: "manifest.json",
                    message: "version \(version) is not supported (this dopesync reads version 1)"))
        }
        guard let formatValue = object["format"] else { return invalid("missing format") }
        guard let format = formatValue.stringValue else { return invalid("format: wrong type") }
        guard format == "truedope-session-bundle" else {
            return .failure(
                BundleError(
                    .manifestInvalid, culprit: "manifest.json",
                    message: "format must be \"truedope-session-bundle\" (was \"\(format)\")"))
        }
        guard let filesValue = object["files"] else { return invalid("missing files") }
        guard let files = filesValue.objectValue else { return invalid("files: wrong type") }
        var listed: [Listed] = []
        for member in files.members {
            let key = "files.\(member.key)"
            guard let file = member.value.objectValue else { return invalid("\(key): wrong type") }
            guard let sizeValue = file["size"] else { return invalid("missing \(key).size") }
            guard let size = sizeValue.numberValue?.intValue else { return invalid("\(key).size: wrong type") }
            guard let shaValue = file["sha256"] else { return invalid("missing \(key).sha256") }
            guard let sha256 = shaValue.stringValue else { return invalid("\(key).sha256: wrong type") }
            listed.append(Listed(name: member.key, size: Int64(size), sha256: sha256))
        }
        return .success(listed)
    }
}

extension SessionDocument.ImageReference {
    /// Where the record names this image, for error messages.
    package var fieldPath: String {
        switch role {
        case .photo: "groupEntries[\(groupIndex)].imageFileNames"
        case .original: "groupEntries[\(groupIndex)].measurement.originalImageFileName"
        case .annotated: "groupEntries[\(groupIndex)].measurement.annotatedImageFileName"
        }
    }
}

extension SessionIssue {
    /// `session.json: groupEntries[2].measurement.bulletDiameter`, or `session.json` for the whole document.
    package var culprit: String {
        let path = "\(self.path)"
        return path.isEmpty ? "session.json" : "session.json: \(path)"
    }
}

extension Result {
    var successValue: Success? {
        if case .success(let value) = self { return value }
        return nil
    }
}
