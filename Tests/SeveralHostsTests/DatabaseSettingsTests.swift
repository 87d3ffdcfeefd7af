import DopeSync
import Testing

@Suite struct DatabaseSettingsTests {
    @Test func aURLGivesHostPortUserDatabaseAndTLSAndPrintsWithoutAPassword() throws {
        let settings = try DatabaseSettings.parse("postgresql://dopesync@db.example:6432/spool?sslmode=verify-full")
            .get()
        #expect(settings.host == "db.example")
        #expect(settings.port == 6432)
        #expect(settings.user == "dopesync")
        #expect(settings.database == "spool")
        #expect(settings.tls == .verifyFull)
        #expect(settings.url == "postgresql://dopesync@db.example:6432/spool?sslmode=verify-full")
        let defaults = try DatabaseSettings.parse("postgres://worker@[::1]/dopesync").get()
        #expect(defaults.port == 5432)
        #expect(defaults.host == "::1")
        #expect(defaults.tls == .prefer)
        #expect(defaults.lease == .seconds(30))
    }

    @Test(arguments: [
        ("postgresql://dopesync:hunter2@db/spool", "password"),
        ("mysql://dopesync@db/spool", "postgresql://"),
        ("postgresql://db/spool", "no user"),
        ("postgresql://dopesync@db", "no database"),
        ("postgresql://dopesync@db/spool?sslmode=require-ish", "sslmode"),
        ("postgresql://dopesync@db/spool?timeout=3", "timeout"),
    ])
    func aURLItCannotUseIsRefusedNamingWhyAndNeverEchoingAPassword(url: String, says: String) throws {
        guard case .failure(let problem) = DatabaseSettings.parse(url) else {
            Issue.record("\(url) was accepted")
            return
        }
        #expect(problem.description.contains(says))
        #expect(!problem.description.contains("hunter2"))
    }

    @Test func theJobFileNamesTheDatabaseAndTheEnvironmentItsPassword() throws {
        let configuration = try RunConfiguration.resolve(
            commandLine: [.database: "postgresql://dopesync@127.0.0.1:5432/dopesync", .lease: "5s"],
            environment: ["DOPESYNC_DATABASE_PASSWORD": "s3cret"], jobFile: nil, purpose: .spoolOnly)
        let database = try #require(configuration.database)
        #expect(database.password == "s3cret")
        #expect(database.lease == .seconds(5))
        #expect(!configuration.description.contains("s3cret"))
        #expect(configuration.description.contains("database=postgresql://dopesync@127.0.0.1:5432/dopesync"))
    }

    @Test func aPasswordInTheURLOrALeaseUnderASecondIsAConfigurationError() {
        #expect(throws: ConfigurationError.self) {
            try RunConfiguration.resolve(
                commandLine: [.database: "postgresql://u:pw@h/d"], environment: [:], jobFile: nil, purpose: .spoolOnly)
        }
        #expect(throws: ConfigurationError.self) {
            try RunConfiguration.resolve(
                commandLine: [.database: "postgresql://u@h/d", .lease: "500ms"], environment: [:], jobFile: nil,
                purpose: .spoolOnly)
        }
    }
}
