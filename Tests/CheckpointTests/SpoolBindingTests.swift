import DopeSyncStore
import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The spool's binding to its store (`SPOOL/dopesync.store`) as runs that start together see it.
@Suite struct SpoolBindingTests {
    let folder: TemporaryFolder

    init() throws { folder = try TemporaryFolder("binding") }

    @Test("a binding read while another run links it into place is either absent or read, never unreadable")
    func aBindingAppearingMeanwhileIsNeverUnreadable() async throws {
        let spool = Spool(root: folder.sub("spool"))
        try await spool.create()
        let store = StoreIdentity(kind: .postgresql, id: "4f1c", name: "postgresql://db.example/dopesync")
        try await SpoolBinding.rebind(spool, to: store)
        let bound = SpoolBinding.path(spool)
        let spare = bound + ".spare"
        #expect(link(bound, spare) == 0)
        #expect(unlink(bound) == 0)
        // Another run binding the spool, over and over: the file there, then gone, as a link
        // makes it appear at once.
        let ((read, absent, refusals), toggled) = try await race { () -> (Int, Int, [String]) in
            var (read, absent, refusals) = (0, 0, [String]())
            for _ in 0..<3_000 {
                do {
                    if try SpoolBinding.read(spool) == store { read += 1 } else { absent += 1 }
                } catch {
                    refusals.append("\(error)")
                }
            }
            return (read, absent, refusals)
        } alongside: { isOver in
            var times = 0
            while !isOver() {
                link(spare, bound)
                unlink(bound)
                times += 1
            }
            return times
        }
        #expect(toggled > 0)
        // A look that found nothing, then a second look that found the file, took it for one that
        // cannot be read and refused the whole spool (exit 73) on a healthy host.
        #expect(refusals.isEmpty, "\(refusals.count) refusals: \(refusals.prefix(2))")
        #expect(read > 0 && absent > 0, "read \(read), absent \(absent)")
    }

    @Test("a binding that cannot be read refuses the spool and names the file, and an absent one is no binding")
    func anUnreadableBindingIsNotTakenForNone() throws {
        let spool = Spool(root: folder.sub("spool"))
        try spool.create()
        #expect(try SpoolBinding.read(spool) == nil)
        try FileManager.default.createDirectory(atPath: SpoolBinding.path(spool), withIntermediateDirectories: false)
        #expect {
            try SpoolBinding.read(spool)
        } throws: { error in
            guard let error = error as? SpoolBindingError else { return false }
            return error.code == .unreadable && error.path == SpoolBinding.path(spool)
                && error.message.contains("cannot read \(SpoolBinding.path(spool))")
        }
    }
}
