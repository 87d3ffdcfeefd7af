import DopeSyncStore
import DopeSyncTestSupport
import Foundation
import Synchronization
import Testing

/// The spool's binding to its store (`SPOOL/dopesync.store`) as runs that start together see it.
@Suite struct SpoolBindingTests {
    let folder: TemporaryFolder

    init() throws { folder = try TemporaryFolder("binding") }

    @Test("runs that bind a new spool at the same moment all find it bound to their one store")
    func runsBindingAtOnceAllSeeTheBinding() throws {
        let store = StoreIdentity(kind: .postgresql, id: "4f1c", name: "postgresql://db.example/dopesync")
        let refusals = Mutex<[String]>([])
        for round in 0..<200 {
            let spool = Spool(root: folder.sub("spool-\(round)"))
            try spool.create()
            DispatchQueue.concurrentPerform(iterations: 4) { _ in
                do {
                    try SpoolBinding.check(spool, store: store, bindIfUnbound: true)
                } catch {
                    refusals.withLock { $0.append("round \(round): \(error)") }
                }
            }
            #expect(try SpoolBinding.read(spool) == store)
        }
        // A run that read the file as it was being bound took the race for an unreadable file,
        // and refused the whole spool (exit 73) on a healthy host.
        #expect(refusals.withLock { $0 } == [])
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
