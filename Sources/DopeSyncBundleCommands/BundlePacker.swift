import Crypto
import DopeSyncSupport
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

    /// An image to pack: where it is inside the bundle and on disk, and what was checked of it.
    struct PackedImage {
        let entry: String
        let source: String
        let size: Int64
        let sha256: String
    }

    /// Packs and returns the path written.
    @discardableResult
    public func pack(sessionFile: String, imagesDirectory: String?, destination: Destination) throws -> String {
        let (sessionBytes, session) = try readSession(sessionFile)
        let folder = imagesDirectory ?? FileSystem.directory(of: sessionFile) + "/images"
        let images = try checkImages(of: session, in: folder, sessionFile: sessionFile)
        if case .spool(let root) = destination {
            try Spool(root: root).create()  // the folders a spool needs, as `run --create-spool` makes them
        }
        let manifest = Self.manifest(
            [("session.json", Int64(sessionBytes.count), SHA256.hash(data: sessionBytes).hexString)]
                + images.map { ($0.entry, $0.size, $0.sha256) })
        // A file of the user's own has the mode their umask gives any new file; one dropped into a
        // spool must stay readable to the worker (a producer's rule), whatever the umask.
        let (target, temporaryDirectory, replace, mode): (String, String, Bool, mode_t) =
            switch destination {
            case .file(let path): (path, FileSystem.directory(of: path), true, 0o666 & ~FileSystem.processUmask)
            case .spool(let root): ("\(root)/incoming/\(session.session.id).tar.gz", "\(root)/tmp", false, 0o644)
            }
        return try FileSystem.writeAtomically(
            to: target, temporaryDirectory: temporaryDirectory, replace: replace, mode: mode
        ) {
            descriptor in
            try withTarGzipWriter(fileDescriptor: descriptor, culprit: target) { writer in
                let now = Int(Date().timeIntervalSince1970)
                for (path, bytes) in [("session.json", sessionBytes), ("manifest.json", manifest)] {
                    try writer.addFile(path: path, size: Int64(bytes.count), modificationTime: now) { write in
                        try bytes.withUnsafeBytes { try write($0) }
                    }
                }
                for image in images { try Self.add(image, to: writer, modificationTime: now) }
            }
        }
    }

    /// `session.json`'s bytes, validated as a run would.
    private func readSession(_ sessionFile: String) throws -> ([UInt8], SessionDocument) {
        let sessionBytes: [UInt8]
        do {
            sessionBytes = try FileSystem.readFile(sessionFile, maxBytes: Int(limits.maxSessionBytes))
        } catch let error as FileSystemError {
            throw BundleValidationError(
                bundle: sessionFile, errors: [BundleError(.io, culprit: sessionFile, message: error.description)])
        }
        switch SessionValidator.validate(sessionBytes, maxBytes: Int(limits.maxSessionBytes)) {
        case .success(let document): return (sessionBytes, document)
        case .failure(let failure):
            throw BundleValidationError(
                bundle: sessionFile,
                errors: failure.issues.map { BundleError(.invalidSession, culprit: $0.culprit, message: $0.message) }
            )
        }
    }

    /// Every image the records name: present, recognised, hashed for the manifest; every problem
    /// at once.
    private func checkImages(of session: SessionDocument, in folder: String, sessionFile: String) throws
        -> [PackedImage]
    {
        var images: [PackedImage] = []
        var errors: [BundleError] = []
        var seen: Set<String> = []
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
            images.append(
                PackedImage(
                    entry: "images/\(reference.fileName)", source: source, size: size,
                    sha256: hasher.finalize().hexString))
        }
        if !errors.isEmpty { throw BundleValidationError(bundle: sessionFile, errors: errors) }
        return images
    }

    /// Writes an image into the archive, hashing it again as written: an image rewritten in place
    /// since it was hashed (same size, other bytes) would make a bundle whose manifest contradicts it.
    private static func add(_ image: PackedImage, to writer: ArchiveWriter, modificationTime: Int) throws {
        var hasher = SHA256()
        try writer.addFile(path: image.entry, size: image.size, modificationTime: modificationTime) { write in
            try FileSystem.withChunks(of: image.source) { chunk in
                hasher.update(bufferPointer: chunk)
                try write(chunk)
            }
        }
        guard hasher.finalize().hexString == image.sha256 else {
            throw BundleError(
                .io, culprit: image.source, message: "changed while being packed (its SHA-256 is not the one checked)")
        }
    }

    /// `manifest.json` with its files in the order given (deterministic bytes).
    static func manifest(_ files: [(path: String, size: Int64, sha256: String)]) -> [UInt8] {
        let entries = files.map {
            "    \(JSONValue.quoted($0.path)): {\"size\": \($0.size), \"sha256\": \"\($0.sha256)\"}"
        }
        let text =
            "{\n  \"format\": \"truedope-session-bundle\",\n  \"version\": 1,\n  \"files\": {\n"
            + entries.joined(separator: ",\n") + "\n  }\n}\n"
        return Array(text.utf8)
    }
}
