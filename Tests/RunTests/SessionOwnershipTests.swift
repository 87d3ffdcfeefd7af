import DopeSync
import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A session belongs to the producer (the bundle file's owner) that first sent it: another
/// producer's bundle naming it goes to `failed/` before anything of it is sent.
@Suite(.enabled(if: geteuid() == 0, "needs root to make producer users and give them files"))
struct SessionOwnershipTests {
    /// Real users for the test's length (`useradd`), removed after `body`, whatever it did.
    static func withProducers<T>(_ names: [String], _ body: ([uid_t]) async throws -> T) async throws -> T {
        for name in names {
            _ = try? await runProcess("/usr/sbin/userdel", [name])  // one a crashed run left behind
            _ = try await runProcess("/usr/sbin/useradd", ["--no-create-home", "--shell", "/usr/sbin/nologin", name])
        }
        let uids = names.map { getpwnam($0).map { $0.pointee.pw_uid } ?? 0 }
        do {
            let result = try await body(uids)
            for name in names { _ = try? await runProcess("/usr/sbin/userdel", [name]) }
            return result
        } catch {
            for name in names { _ = try? await runProcess("/usr/sbin/userdel", [name]) }
            throw error
        }
    }

    static func chownBundle(_ spool: Spool, _ name: String, to uid: uid_t) {
        #expect(chown(spool.path(.incoming, name), uid, uid) == 0)
    }

    @Test(
        "another producer's bundle naming a producer's session fails before anything is sent, naming both owners",
        arguments: keysHonouredOrIgnored)
    func anotherProducersBundleIsRefused(keysHonoured: Bool) async throws {
        // Names of this case's own: the two cases run at once.
        let (aliceName, malloryName) = ("dopesync-t-alice-\(keysHonoured)", "dopesync-t-mallory-\(keysHonoured)")
        try await Self.withProducers([aliceName, malloryName]) { uids in
            let (alice, mallory) = (uids[0], uids[1])
            try await withTemporaryDirectory { directory in
                let victim = SampleSession(seed: 3600)
                let spool = try await makeSpool(in: directory, samples: [victim])
                Self.chownBundle(spool, "\(victim.sessionID).tar.gz", to: alice)
                var configuration = DevServerConfiguration()
                configuration.ignoreIdempotencyKeys = !keysHonoured
                try await withDevServer(configuration) { server in
                    let first = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                    #expect(first.1 == .success && first.0.done == 1, "\(first.0)")

                    // Mallory's own records, packed under alice's session id.
                    var injected = SampleSession(seed: 3601)
                    injected.sessionID = victim.sessionID
                    injected.json["id"] = victim.sessionID
                    let scratch = directory.appendingPathComponent("mallory")
                    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: false)
                    let name = try pack(injected, into: spool, scratch: scratch)
                    Self.chownBundle(spool, name, to: mallory)
                    let postsBefore = try await server.requestLog().filter { $0.method == "POST" }.count

                    let (summary, status) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                    #expect(status == .bundlesFailed && summary.failed == 1, "\(summary)")
                    #expect(try await server.requestLog().filter { $0.method == "POST" }.count == postsBefore)
                    let sidecar = try String(
                        contentsOfFile: spool.path(.failed, Spool.sidecarName(forFailed: name)), encoding: .utf8)
                    #expect(sidecar.contains("reason: session_of_another_producer"), "\(sidecar)")
                    #expect(sidecar.contains("\(aliceName) (uid \(alice))"), "\(sidecar)")
                    #expect(sidecar.contains("\(malloryName) (uid \(mallory))"), "\(sidecar)")
                    let tree = try await server.sessionTree(clientID: victim.sessionID)
                    #expect(tree.dope.map(\.clientId).sorted() == victim.dopeEntryIDs.sorted())

                    // Alice's own bundle of the session again: a continuation, as before.
                    let again = directory.appendingPathComponent("alice-again")
                    try FileManager.default.createDirectory(at: again, withIntermediateDirectories: false)
                    let continued = try pack(victim, into: spool, scratch: again)
                    Self.chownBundle(spool, continued, to: alice)
                    let (resumed, resumedStatus) = await runWorker(spool, apiURL: server.baseURL, token: server.token)
                    #expect(resumedStatus == .success && resumed.done == 1, "\(resumed)")
                }
            }
        }
    }
}
