import DopeSync
import DopeSyncTestSupport
import Foundation
import Testing

/// The SQLite file and the PostgreSQL database execute the same step rules (``StepRules``): one
/// sequence of intents, results and steps found on the server leaves the same steps in each,
/// and a conflict among the steps found records none of them in either.
@Suite struct StepsInBothStoresTests {
    let owner = ClaimOwner(host: "host-a", pid: 1, runID: "run-a")

    func intent(_ key: String) -> CheckpointStore.StepIntent {
        CheckpointStore.StepIntent(
            stepKey: key, idempotencyKey: "key-\(key)", requestFingerprint: "f-\(key)", contentDigest: "d-\(key)",
            bundleName: "x.tar.gz")
    }

    /// The sequence, on `storage`; then each step of the session, as `ledger` reads it, as
    /// `key state serverID`.
    func play(_ storage: some CheckpointStorage, _ ledger: some CheckpointLedger, claims: some ClaimStorage)
        async throws -> [String]
    {
        #expect(try await claims.acquireClaim(of: "x.tar.gz", orphan: false, owner: owner))
        let first = try await storage.recordIntents(
            sessionID: "s1", [intent("session"), intent("dope:1"), intent("dope:2")])
        #expect(first == [.recorded, .recorded, .recorded])
        let results = try await withCheckedThrowingContinuation { continuation in
            storage.recordResults([.init(sessionID: "s1", stepKey: "session", serverID: 11)]) {
                continuation.resume(with: $0)
            }
        }
        #expect((try? results[0].get())?.serverID == 11)

        // Found after a lost answer: two steps sent, one never recorded here at all.
        let found = try await storage.recordFoundOnServer(
            sessionID: "s1", [(intent("dope:1"), 21), (intent("dope:2"), 22), (intent("dope:3"), 23)])
        #expect(found.map(\.serverID) == [21, 22, 23])
        #expect(found.map(\.contentDigest) == ["d-dope:1", "d-dope:2", "d-dope:3"])

        // One of these is done here under another id: none of them is recorded.
        await #expect {
            try await storage.recordFoundOnServer(sessionID: "s1", [(intent("dope:4"), 24), (intent("session"), 99)])
        } throws: { ($0 as? CheckpointError)?.code == .conflictingResult }

        let again = try await storage.recordIntents(sessionID: "s1", [intent("session"), intent("dope:4")])
        #expect(again.count == 2)
        if case .alreadyDone(let done) = again.first { #expect(done.serverID == 11) } else { Issue.record("\(again)") }
        #expect(again.last == .recorded, "dope:4 was not left behind by the conflict")

        return try await ledger.steps(sessionID: "s1").map { step in
            "\(step.stepKey) \(step.state.rawValue) \(step.serverID.map(String.init) ?? "-")"
        }.sorted()
    }

    static let expected = [
        "dope:1 done 21", "dope:2 done 22", "dope:3 done 23", "dope:4 sent -", "session done 11",
    ]

    @Test func theSQLiteFileKeepsTheSteps() async throws {
        let folder = try TemporaryFolder("steps-sqlite")
        let store = try CheckpointStore(path: folder.url.appendingPathComponent("checkpoints.sqlite").path)
        let steps = try await CheckpointWriter.with(store) { writer in
            try await play(writer, store, claims: SpoolClaims(othersHeldTheStoreLock: false))
        }
        #expect(steps == Self.expected)
    }

    @Test func thePostgreSQLDatabaseKeepsTheSameSteps() async throws {
        let database = try await SharedCluster.freshDatabase()
        let steps = try await PostgresCheckpoints.with(
            database.settings(lease: .seconds(3600)), owner: owner, statementTimeout: .seconds(120),
            logger: quietLogger
        ) { store in try await play(store, store, claims: store) }
        #expect(steps == Self.expected)
    }
}
