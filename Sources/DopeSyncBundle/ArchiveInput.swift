import CArchive

#if canImport(Glibc)
    import Glibc
#endif

/// The file under an archive: libarchive pulls its blocks through these callbacks, so every read
/// can be refused once the ``ReadBudget`` is spent.
final class ArchiveInput {
    let descriptor: Int32
    let block: UnsafeMutableRawBufferPointer
    let budget: ReadBudget
    let path: String
    /// Set when a callback refused to go on; it is the reason, libarchive's message is not.
    var interruption: BundleError?
    var readErrno: Int32 = 0
    /// Whether the file was read to its end: a stream that fails after that is cut short.
    var reachedEnd = false

    init(descriptor: Int32, blockSize: Int, budget: ReadBudget, path: String) {
        self.descriptor = descriptor
        self.block = .allocate(byteCount: blockSize, alignment: 16)
        self.budget = budget
        self.path = path
    }

    deinit {
        block.deallocate()
        close(descriptor)
    }

    static func from(_ clientData: UnsafeMutableRawPointer?) -> ArchiveInput {
        Unmanaged<ArchiveInput>.fromOpaque(clientData!).takeUnretainedValue()
    }

    static func read(
        _: OpaquePointer?, _ clientData: UnsafeMutableRawPointer?, _ buffer: UnsafeMutablePointer<UnsafeRawPointer?>?
    ) -> la_ssize_t {
        let input = ArchiveInput.from(clientData)
        if let reason = input.budget.exceeded(culprit: input.path) {
            input.interruption = reason
            return -1
        }
        while true {
            let count = Glibc.read(input.descriptor, input.block.baseAddress, input.block.count)
            if count < 0 && errno == EINTR { continue }
            if count < 0 { input.readErrno = errno }
            if count == 0 { input.reachedEnd = true }
            buffer?.pointee = UnsafeRawPointer(input.block.baseAddress)
            return count
        }
    }

    static func seek(_: OpaquePointer?, _ clientData: UnsafeMutableRawPointer?, _ offset: la_int64_t, _ whence: Int32)
        -> la_int64_t
    {
        let input = ArchiveInput.from(clientData)
        return la_int64_t(lseek(input.descriptor, off_t(offset), whence))
    }
}
