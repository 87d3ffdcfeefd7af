import DopeSyncTestSupport
import Foundation
import Testing

@testable import DopeSync
@testable import DopeSyncStore

/// `migrate --to`'s import into PostgreSQL (``PostgresCheckpoints/importCheckpoints(steps:bundles:runs:referenceLists:sessions:apiAddresses:)``):
/// what the database already holds is kept, a step only sent there and done in the file becomes
/// done, a step done there under another id refuses the whole import, and a file of more steps
/// than one batch goes in whole, its times to the bit.
@Suite struct ImportTests {
    func step(_ session: String, _ key: String, done serverID: Int64?, at time: Double = 1_795_820_386.6752574)
        -> StepRecord
    {
        StepRecord(
            sessionID: session, stepKey: key, idempotencyKey: "key-\(key)", requestFingerprint: "f", contentDigest: "d",
            state: serverID == nil ? .sent : .done, serverID: serverID, sentAt: Date(timeIntervalSince1970: time),
            doneAt: serverID.map { _ in Date(timeIntervalSince1970: time) }, bundleName: "\(session).tar.gz")
    }

    func importing(_ steps: [StepRecord], into database: SharedDatabase) async throws
        -> PostgresCheckpoints.ImportCounts
    {
        try await PostgresCheckpoints.with(database.settings(), statementTimeout: .seconds(30), logger: quietLogger) {
            store in
            try await store.importCheckpoints(
                steps: steps, bundles: [], runs: [], referenceLists: [:],
                sessions: ["s1": SessionBinding(api: "api-1", owner: Producer(uid: 1000, name: "kiosk"))],
                apiAddresses: ["http://api:80": "api-1"])
        }
    }

    @Test func rowsThereAreKeptASentStepBecomesDoneAndABigFileGoesInWhole() async throws {
        let database = try await SharedCluster.freshDatabase()
        // The database's own: a step sent, one done.
        _ = try await importing([step("s1", "a", done: nil), step("s1", "b", done: 5)], into: database)

        // More steps than three batches hold, so the last batch is a part one.
        let many = (0..<(3 * PostgresCheckpoints.importBatch + 7)).map {
            step("s2", "dope:\($0)", done: Int64($0 + 100))
        }
        let counts = try await importing(
            [step("s1", "a", done: 1), step("s1", "b", done: 5), step("s1", "c", done: nil)] + many, into: database)
        #expect(counts.steps == 2 + many.count, "a made done, c and the many added")
        #expect(counts.alreadyThere == 1, "b was there, done as in the file")
        #expect(
            try await database.psql(
                "SELECT step_key, state, server_id FROM dopesync.steps WHERE session_id = 's1' ORDER BY 1")
                == "a|done|1\nb|done|5\nc|sent|")
        #expect(
            try await database.psql("SELECT count(*) FROM dopesync.steps WHERE session_id = 's2'") == "\(many.count)")
        #expect(
            try await database.psql(
                "SELECT count(*) FROM dopesync.steps WHERE sent_at = 1795820386.6752574::float8 AND done_at = sent_at")
                == "\(many.count + 2)", "a time read back differs from the file's")
        #expect(
            try await database.psql("SELECT api, owner_uid, owner_name FROM dopesync.sessions WHERE session_id = 's1'")
                == "api-1|1000|kiosk")
        #expect(try await database.psql("SELECT api FROM dopesync.api_addresses") == "api-1")
    }

    @Test func aStepDoneThereUnderAnotherIDRefusesTheImportAndWritesNothing() async throws {
        let database = try await SharedCluster.freshDatabase()
        _ = try await importing([step("s1", "b", done: 5)], into: database)
        let many = (0..<(PostgresCheckpoints.importBatch + 1)).map { step("s2", "dope:\($0)", done: Int64($0 + 100)) }
        // The conflict sits in the second batch: the first batch's rows must not stay.
        await #expect {
            try await importing(many + [step("s1", "b", done: 6)], into: database)
        } throws: { error in
            let error = error as? CheckpointError
            return error?.code == .conflictingResult
                && error?.message.contains("step b of session s1 was done with server id 5, in the file as 6") == true
        }
        #expect(try await database.psql("SELECT count(*) FROM dopesync.steps") == "1")
    }

    @Test func aValueTheFileCannotCarryFailsAsCorruptNotAsAnOutage() async throws {
        let database = try await SharedCluster.freshDatabase()
        let run = RunRecord(
            runID: "r1", host: "h", pid: 1, startedAt: Date(), finishedAt: Date(),
            summary: RunSummary(seconds: .nan))
        await #expect {
            try await PostgresCheckpoints.with(database.settings(), statementTimeout: .seconds(30), logger: quietLogger)
            {
                store in
                try await store.importCheckpoints(
                    steps: [step("s1", "a", done: 1)], bundles: [], runs: [run], referenceLists: [:])
            }
        } throws: { error in
            let error = error as? CheckpointError
            return error?.code == .corrupt && error?.message.contains("cannot be copied") == true
        }
        #expect(try await database.psql("SELECT count(*) FROM dopesync.steps") == "0")
    }
}
