import CFuzzerDriver
import DopeSync

#if canImport(Glibc)
    import Glibc
#endif

/// libFuzzer target for the bundle reader (`make fuzz`, Scripts/fuzz.sh): each input is written
/// to one file, reused for every input, and validated as `dopesync inspect` and `run` do. A
/// refusal must be a `BundleValidationError` with at least one reason; an accepted bundle must
/// render its report, plan its upload and stream every image back with the size and SHA-256
/// that validation recorded. Anything else (a trap, an ASan report, a leak, a timeout, an
/// out-of-memory) is a finding.
@main
enum BundleReaderFuzz {
    /// docs/bundle-format.md's defaults, with the byte limits lowered so that a decompression bomb costs a few
    /// milliseconds and the fuzzer reaches every limit often. The checks are the same code.
    static let limits: BundleLimits = {
        var limits = BundleLimits()
        limits.maxTotalBytes = 64 << 20
        limits.maxSessionBytes = 1 << 20
        limits.ratioCheckAfterBytes = 1 << 20
        return limits
    }()

    /// One file per process, in `TMPDIR` (Scripts/fuzz.sh points it at /dev/shm) or /dev/shm.
    static let path: String = {
        let folder =
            getenv("TMPDIR").map { String(cString: $0) } ?? (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp")
        return "\(folder)/dopesync-bundle-fuzz-\(getpid())"
    }()

    static func main() {
        atexit { unlink(BundleReaderFuzz.path) }
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(
            LLVMFuzzerRunDriver(&argc, &argv) { data, size in
                BundleReaderFuzz.testOneInput(UnsafeRawBufferPointer(start: data, count: size))
                return 0
            })
    }

    static func testOneInput(_ bytes: UnsafeRawBufferPointer) {
        write(bytes, to: path)
        let bundle: ValidatedBundle
        do {
            bundle = try BundleInspector(limits: limits).inspect(path: path)
        } catch {
            // Typed throws: nothing but a BundleValidationError can get here.
            precondition(!error.errors.isEmpty, "a refusal without a reason")
            _ = BundleReport(error, limits: limits).text()
            return
        }
        _ = BundleReport(bundle).text()
        _ = try? UploadPlan(session: bundle.session, images: bundle.images)
        let reader = BundleEntryReader(bundle: bundle, chunkSize: 16 * 1024)
        for image in bundle.images.values.sorted(by: { $0.fileName < $1.fileName }) {
            var streamed: Int64 = 0
            do {
                // The last chunk checks size and SHA-256 against validation.
                try reader.withImageChunks(image) { streamed += Int64($0.count) }
            } catch {
                fatalError("validated image \(image.entryPath) could not be streamed back: \(error)")
            }
            precondition(
                streamed == image.size, "streamed \(streamed) bytes of \(image.entryPath), validated \(image.size)")
        }
    }

    static func write(_ bytes: UnsafeRawBufferPointer, to path: String) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard descriptor >= 0 else { fatalError("cannot open \(path): errno \(errno)") }
        defer { close(descriptor) }
        var offset = 0
        while offset < bytes.count {
            let written = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            guard written > 0 else { fatalError("cannot write \(path): errno \(errno)") }
            offset += written
        }
    }
}
