import DopeSyncTestSupport
import Foundation
import HTTPTypes
import SQLiteSupport
import Testing

@testable import DopeSyncDevServer

/// Pure logic: no server, no disk.
@Suite struct JSONValueTests {
    @Test(arguments: [
        (#"{"a":1,"b":1.5,"c":null,"d":true,"e":"x\"y\u00e9\ud83d\ude00","f":[1,{"g":-0}]}"#, true),
        (#"  [1e3, -2.5E-2]  "#, true),
        (#"{"a":}"#, false), (#"{"a":1,}"#, false), (#"[01]"#, false), ("nul", false), (#""\x""#, false),
        (#"{"a":1} x"#, false), (#"1e999"#, false), (#""\ud83d""#, false), ("", false),
        (String(repeating: "[", count: 100) + String(repeating: "]", count: 100), false),
    ])
    func parsesOnlyValidJSON(_ text: String, _ valid: Bool) {
        let parsed = (try? JSONValue.parse(Array(text.utf8))) != nil
        #expect(parsed == valid, "\(text.prefix(40))")
    }

    @Test func keepsIntegersApartFromFractionsAndNullApartFromMissing() throws {
        let value = try JSONValue.parse(Array(#"{"i":3,"f":3.0,"n":null,"s":"é\n"}"#.utf8))
        #expect(value["i"] == .integer(3))
        #expect(value["f"] == .number(3))
        #expect(value["n"] == .null)
        #expect(value["missing"] == nil)
        #expect(value["s"] == .string("é\n"))
        #expect(value.jsonText == #"{"i":3,"f":3.0,"n":null,"s":"é\n"}"#)
    }
}

@Suite struct ConfigurationParsingTests {
    @Test func idSetsParseRangesAndLists() throws {
        let ids = try IDSet(parsing: "1-3, 7,10-12")
        #expect([1, 3, 7, 10, 12].allSatisfy(ids.contains))
        #expect(![0, 4, 9, 13].contains(where: ids.contains))
        #expect(ids.description == "1-3,7,10-12")
        #expect(try IDSet(parsing: "").ranges.isEmpty)
        for bad in ["0", "3-1", "a", "1-", "-5"] {
            #expect(throws: DevServerConfigurationError.self) { try IDSet(parsing: bad) }
        }
    }

    @Test func latencyRangesParse() throws {
        #expect(try ClosedRange<Int>.parsingMilliseconds("5") == 5...5)
        #expect(try ClosedRange<Int>.parsingMilliseconds("10-20") == 10...20)
        #expect(throws: DevServerConfigurationError.self) { try ClosedRange<Int>.parsingMilliseconds("20-10") }
    }

    @Test(arguments: [
        ("2024-05-01T10:00:00Z", true), ("2024-05-01T10:00:00.123+02:00", true), ("2024-05-01t10:00:00z", true),
        ("2024-05-01", false), ("2024-05-01T25:00:00Z", false), ("2024-05-01T10:00:00", false),
        ("2024-05-01T10:00:00+2", false),
    ])
    func dateTimes(_ text: String, _ valid: Bool) {
        #expect(isRFC3339DateTime(text) == valid)
    }
}

@Suite struct ImageSniffingTests {
    @Test(
        arguments: [
            ([0xFF, 0xD8, 0xFF, 0xDB], ImageType.jpeg), ([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A], .png),
            ([0, 0, 0, 0x1C] + Array("ftypmif1".utf8), .heic), ([0, 0, 0, 0x1C] + Array("ftyphevx".utf8), .heic),
            (Array("RIFF".utf8) + [1, 2, 3, 4] + Array("WEBP".utf8), .webp),
        ] as [([UInt8], ImageType)])
    func recognises(_ bytes: [UInt8], _ type: ImageType) {
        #expect(bytes.withUnsafeBytes { ImageType(sniffing: $0) } == type)
    }

    @Test(
        arguments: [
            [0xFF, 0xD8], [0x89, 0x50, 0x4E, 0x47], [0, 0, 0, 0x1C] + Array("ftypisom".utf8),
            Array("RIFF1234WAVE".utf8), [],
        ] as [[UInt8]])
    func refuses(_ bytes: [UInt8]) {
        #expect(bytes.withUnsafeBytes { ImageType(sniffing: $0) } == nil)
    }
}

@Suite struct FaultInjectorTests {
    @Test func theSameSeedDrawsTheSameFates() {
        var configuration = FaultConfiguration()
        configuration.failRate = 0.2
        configuration.rateLimitRate = 0.2
        configuration.dropAfterCommitRate = 0.2
        configuration.latencyMilliseconds = 0...50
        configuration.seed = 99
        let first = FaultInjector(configuration)
        let second = FaultInjector(configuration)
        let a = (0..<200).map { _ in first.decide() }
        let b = (0..<200).map { _ in second.decide() }
        #expect(a == b)
        #expect(a.contains { $0.early == .rateLimited })
        #expect(a.contains { $0.early == .serverError(status: 500) })
        #expect(a.contains { $0.early == .serverError(status: 503) })
        #expect(a.contains { $0.dropAfterCommit })
        #expect(a.allSatisfy { (0...50).contains($0.latencyMilliseconds) })
    }

    @Test func noFaultsConfiguredMeansNone() {
        let injector = FaultInjector(FaultConfiguration())
        #expect((0..<10).allSatisfy { _ in injector.decide() == .none })
    }
}

@Suite struct StoreTests {
    @Test(
        "a database from before migrations were recorded by name (user_version 1) opens with its records and is not migrated again"
    )
    func aDatabaseCountedByUserVersionIsAdopted() async throws {
        let folder = try TemporaryFolder("devserver-store")
        let path = folder.sub("devserver.sqlite")
        // What the earlier dev server left: its one migration applied, counted in user_version.
        let first = try DevServerStore(path: path, retentionSeconds: 3600)
        let record = DevServerStore.PreparedRecord(
            clientId: BadRequest.uuid, fieldsJSON: #"{"clientId":"\#(BadRequest.uuid)"}"#)
        _ = try await first.createOrReplay(kind: .session, parent: .none, key: nil, prepare: { record })
        try await onOwnThread {
            try SQLiteDatabase(path: path).write { connection in
                try connection.execute("DROP TABLE schema_migrations")
                try connection.execute("PRAGMA user_version = 1")
            }
        }
        let reopened = try DevServerStore(path: path, retentionSeconds: 3600)
        #expect(try await reopened.sessions(clientId: BadRequest.uuid).count == 1)
        let applied = try await onOwnThread { try SQLiteMigrator.appliedNames(SQLiteDatabase(path: path)) }
        #expect(applied == ["create records and idempotency keys"])
    }

    @Test func idempotencyKeysAreKeptSevenDaysThenPurged() async throws {
        let store = try DevServerStore(path: nil, retentionSeconds: 7 * 24 * 3600)
        let record = DevServerStore.PreparedRecord(
            clientId: BadRequest.uuid, fieldsJSON: #"{"clientId":"\#(BadRequest.uuid)"}"#)
        let outcome = try await store.createOrReplay(
            kind: .session, parent: .none, key: .init(credential: "c", key: "k", fingerprint: "f"), prepare: { record })
        guard case .created(let session, _) = outcome else {
            Issue.record("expected a created record, got \(outcome)")
            return
        }
        let now = DevServerStore.now()
        try await store.purgeExpiredKeys(now: now + 6 * 24 * 3600)
        let kept = try await store.storedResponse(credential: "c", key: "k")
        #expect(kept?.body == DevServerStore.createdBody(id: session, clientId: BadRequest.uuid))
        #expect(kept?.fingerprint == "f")
        #expect(try await store.storedResponse(credential: "other", key: "k") == nil)
        try await store.purgeExpiredKeys(now: now + 8 * 24 * 3600)
        #expect(try await store.storedResponse(credential: "c", key: "k") == nil)
        // The record itself stays.
        #expect(try await store.sessionRecords(id: session)?.count == 1)
    }
}

@Suite struct ObservatoryTests {
    @Test func theRequestLogKeepsTheLastEntriesInOrder() {
        let observatory = Observatory(capacity: 3)
        let now = ContinuousClock.now
        for index in 1...5 {
            observatory.record(
                method: "POST", path: "/api/sessions/\(index)", idempotencyKey: nil, status: 201, replayed: index == 5,
                fault: nil, received: now, answered: now + .microseconds(10))
        }
        #expect(observatory.requests(since: 0, limit: 10).map(\.sequence) == [3, 4, 5])
        #expect(observatory.requests(since: 4, limit: 10).map(\.path) == ["/api/sessions/4", "/api/sessions/5"])
        #expect(observatory.requests(since: 0, limit: 1).map(\.sequence) == [3])
        #expect(observatory.nextSequence == 6)
        #expect(observatory.statsJSON().contains(#""requests":5,"replays":1"#))
    }
}

@Suite struct RouteTableTests {
    @Test func aKnownPathListsItsMethodsAndAnUnknownOneNone() {
        let table = RouteTable([
            (.post, "/api/sessions"), (.get, "/api/sessions"), (.get, "/api/sessions/:sessionId"),
            (.post, "/api/sessions/:sessionId/dope"), (.post, "/api/sessions/:sessionId/chrono/:chronoId/readings"),
        ])
        #expect(table.methods(forPath: "/api/sessions") == [.get, .post])
        #expect(table.methods(forPath: "/api/sessions/") == [.get, .post])
        #expect(table.methods(forPath: "/api/sessions/42") == [.get])
        #expect(table.methods(forPath: "/api/sessions/x/dope") == [.post])
        #expect(table.methods(forPath: "/api/sessions/1/chrono/2/readings") == [.post])
        for unknown in ["/", "", "/api", "/api/sessions/1/chrono", "/api/sessions/1/dope/2", "/API/sessions"] {
            #expect(table.methods(forPath: unknown) == nil, "\(unknown)")
        }
    }
}
