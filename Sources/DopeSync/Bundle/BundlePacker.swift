import Crypto
import Foundation

/// Builds a valid bundle from a session JSON file and a folder of images: `dopesync pack`.
///
/// It validates everything first and writes nothing if anything is wrong. The archive is a
/// gzip-compressed tar holding `session.json` (the exact bytes given), `manifest.json`, and the
/// images in upload order, so the worker streams them in one forward pass. It is written
/// atomically: a dot-named temporary file, fsync, rename.
public struct BundlePacker: Sendable {
    public enum Destination: Sendable {
        /// This exact path; an existing file there is replaced (as `tar -cf` would).
        case file(String)
        /// The spool's `incoming/`, by way of its `tmp/`, as `SESSIONID.tar.gz`; a name already
        /// taken gets a suffix, never a replacement.
        case spool(root: String)
    }

    public var limits: BundleLimits

    public init(limits: BundleLimits = .default) {
        self.limits = limits
    }

    /// Packs and returns the path written.
    @discardableResult
    public func pack(sessionFile: String, imagesDirectory: String?, destination: Destination) throws -> String {
        let sessionBytes: [UInt8]
        do {
            sessionBytes = try FileSystem.readFile(sessionFile, maxBytes: Int(limits.maxSessionBytes))
        } catch let error as FileSystemError {
            throw BundleValidationError(
                bundle: sessionFile, errors: [BundleError(.io, culprit: sessionFile, message: error.description)])
        }
        let session: SessionDocument
        switch SessionValidator.validate(sessionBytes, maxBytes: Int(limits.maxSessionBytes)) {
        case .success(let document): session = document
        case .failure(let failure):
            throw BundleValidationError(
                bundle: sessionFile,
                errors: failure.issues.map { BundleError(.invalidSession, culprit: $0.culprit, message: $0.message) }
            )
        }

        // Every image the records name: present, recognised, hashed for the manifest.
        var manifestFiles: [(String, Int64, String)] = [
            ("session.json", Int64(sessionBytes.count), SHA256.hash(data: sessionBytes).hexString)
        ]
        var imagePaths: [(entry: String, source: String, size: Int64, sha256: String)] = []
        var errors: [BundleError] = []
        var seen: Set<String> = []
        let folder = imagesDirectory ?? FileSystem.directory(of: sessionFile) + "/images"
        for reference in session.imageReferences where seen.insert(reference.fileName).inserted {
            let source = "\(folder)/\(reference.fileName)"
            guard FileSystem.isRegularFile(source) else {
                errors.append(
                    BundleError(
                        .missingImage, culprit: reference.fieldPath,
                        message: "names \(reference.fileName), which is not a file in \(folder)"))
                continue
            }
            var hasher = SHA256()
            var size: Int64 = 0
            var prefix: [UInt8] = []
            try FileSystem.withChunks(of: source) { chunk in
                hasher.update(bufferPointer: chunk)
                size += Int64(chunk.count)
                if prefix.count < ImageType.sniffLength { prefix += chunk.prefix(ImageType.sniffLength - prefix.count) }
            }
            guard ImageType(sniffing: prefix) != nil else {
                errors.append(
                    BundleError(.unsupportedImageType, culprit: source, message: "not a JPEG, PNG, HEIC or WebP image"))
                continue
            }
            let sha256 = hasher.finalize().hexString
            manifestFiles.append(("images/\(reference.fileName)", size, sha256))
            imagePaths.append(("images/\(reference.fileName)", source, size, sha256))
        }
        if !errors.isEmpty { throw BundleValidationError(bundle: sessionFile, errors: errors) }

        if case .spool(let root) = destination {
            try Spool(root: root).create()  // the folders a spool needs, as `run --create-spool` makes them
        }
        let manifest = Self.manifest(manifestFiles)
        let now = Int(Date().timeIntervalSince1970)
        let (target, temporaryDirectory, replace): (String, String, Bool) =
            switch destination {
            case .file(let path): (path, FileSystem.directory(of: path), true)
            case .spool(let root): ("\(root)/incoming/\(session.session.id).tar.gz", "\(root)/tmp", false)
            }
        return try FileSystem.writeAtomically(to: target, temporaryDirectory: temporaryDirectory, replace: replace) {
            descriptor in
            try withTarGzipWriter(fileDescriptor: descriptor, culprit: target) { writer in
                try writer.addFile(path: "session.json", size: Int64(sessionBytes.count), modificationTime: now) {
                    write in
                    try sessionBytes.withUnsafeBytes { try write($0) }
                }
                try writer.addFile(path: "manifest.json", size: Int64(manifest.count), modificationTime: now) { write in
                    try manifest.withUnsafeBytes { try write($0) }
                }
                for image in imagePaths {
                    // Hashed again as written: an image rewritten in place since it was hashed (same
                    // size, other bytes) would make a bundle whose manifest contradicts it.
                    var hasher = SHA256()
                    try writer.addFile(path: image.entry, size: image.size, modificationTime: now) { write in
                        try FileSystem.withChunks(of: image.source) { chunk in
                            hasher.update(bufferPointer: chunk)
                            try write(chunk)
                        }
                    }
                    guard hasher.finalize().hexString == image.sha256 else {
                        throw BundleError(
                            .io, culprit: image.source,
                            message: "changed while being packed (its SHA-256 is not the one checked)")
                    }
                }
            }
        }
    }

    /// `manifest.json` with its files in the order given (deterministic bytes).
    static func manifest(_ files: [(path: String, size: Int64, sha256: String)]) -> [UInt8] {
        let entries = files.map { "    \(jsonString($0.path)): {\"size\": \($0.size), \"sha256\": \"\($0.sha256)\"}" }
        let text =
            "{\n  \"format\": \"truedope-session-bundle\",\n  \"version\": 1,\n  \"files\": {\n"
            + entries.joined(separator: ",\n") + "\n  }\n}\n"
        return Array(text.utf8)
    }

    private static func jsonString(_ value: String) -> String {
        // File names are plain names already validated; escape what JSON requires anyway.
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
