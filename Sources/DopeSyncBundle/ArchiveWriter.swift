import CArchive
import ThreadRules

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writes a gzip-compressed tar (POSIX pax) to an open file descriptor, wrapping libarchive.
/// The caller owns the descriptor (and fsyncs it); use it through ``withTarGzipWriter(fileDescriptor:_:)``.
package final class ArchiveWriter {
    private let archive: OpaquePointer
    private let culprit: String

    fileprivate init(fileDescriptor: Int32, culprit: String) throws(BundleError) {
        BlockingCalls.check("libarchive: writing \(culprit)")
        guard let archive = archive_write_new() else {
            throw BundleError(.io, culprit: culprit, message: "libarchive could not allocate a writer")
        }
        self.archive = archive
        self.culprit = culprit
        archive_write_add_filter_gzip(archive)
        archive_write_set_format_pax_restricted(archive)
        if archive_write_open_fd(archive, fileDescriptor) != ARCHIVE_OK {
            let error = Self.error(archive, culprit: culprit)
            archive_write_free(archive)
            throw error
        }
    }

    deinit {
        archive_write_free(archive)
    }

    /// Adds one regular file, its bytes handed over by `produce`, which calls `write` per chunk.
    /// The bytes must be exactly `size`, the size the tar header declares: a file that grew or
    /// shrank since it was measured is an error (libarchive would silently drop bytes past the
    /// declared size, writing 0 of them, so a loop waiting for them would never end).
    package func addFile(
        path: String,
        size: Int64,
        modificationTime: Int,
        _ produce: (_ write: (UnsafeRawBufferPointer) throws(BundleError) -> Void) throws -> Void
    ) throws {
        BlockingCalls.check("libarchive: adding \(path) to \(culprit)")
        guard let entry = archive_entry_new() else {
            throw BundleError(.io, culprit: path, message: "libarchive could not allocate an entry")
        }
        defer { archive_entry_free(entry) }
        archive_entry_set_pathname_utf8(entry, path)
        archive_entry_set_size(entry, size)
        archive_entry_set_filetype(entry, 0o100000)  // AE_IFREG
        archive_entry_set_perm(entry, 0o644)
        archive_entry_set_mtime(entry, modificationTime, 0)
        guard archive_write_header(archive, entry) == ARCHIVE_OK else { throw Self.error(archive, culprit: path) }
        var total: Int64 = 0
        try produce { (chunk: UnsafeRawBufferPointer) throws(BundleError) in
            total += Int64(chunk.count)
            guard total <= size else {
                throw BundleError(
                    .io, culprit: path,
                    message:
                        "changed while being packed: now more than \(size) bytes, the size it had when it was checked")
            }
            var offset = 0
            while offset < chunk.count {
                let written = archive_write_data(archive, chunk.baseAddress! + offset, chunk.count - offset)
                if written <= 0 { throw Self.error(archive, culprit: path) }
                offset += written
            }
        }
        guard total == size else {
            throw BundleError(
                .io, culprit: path,
                message: "changed while being packed: now \(total) bytes, \(size) when it was checked")
        }
        guard archive_write_finish_entry(archive) == ARCHIVE_OK else { throw Self.error(archive, culprit: path) }
    }

    /// Flushes the compressor and the tar trailer.
    func finish() throws(BundleError) {
        guard archive_write_close(archive) == ARCHIVE_OK else { throw Self.error(archive, culprit: culprit) }
    }

    private static func error(_ archive: OpaquePointer, culprit: String) -> BundleError {
        let detail = archive_error_string(archive).map { String(cString: $0) } ?? "unknown error"
        return BundleError(.io, culprit: culprit, message: "writing the archive: \(detail)")
    }
}

package func withTarGzipWriter<T>(fileDescriptor: Int32, culprit: String, _ body: (ArchiveWriter) throws -> T) throws
    -> T
{
    let writer = try ArchiveWriter(fileDescriptor: fileDescriptor, culprit: culprit)
    let result = try body(writer)
    try writer.finish()
    return result
}
