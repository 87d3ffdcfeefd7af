import DopeSyncDevServer
import DopeSyncTestSupport
import Testing

@Suite struct AuthTests {
    /// (Authorization header or nil, expected status, expected code)
    static let cases: [(String?, Int, String)] = [
        (nil, 401, "unauthorized"),
        ("Basic ZGV2OnRva2Vu", 401, "unauthorized"),
        ("Bearer", 401, "unauthorized"),
        ("Bearer    ", 401, "unauthorized"),
        ("Bearer wrong-token", 403, "forbidden"),
        ("Bearer dev-tokenX", 403, "forbidden"),
    ]

    @Test(arguments: cases)
    func apiAndAdminRoutesRefuseABadCredential(_ authorization: String?, _ status: Int, _ code: String) async throws {
        try await withDevServer { server in
            var client = DevServerClient(server)
            client.authorization = authorization
            for response in [
                try await client.post("/api/sessions", json: Bodies.session()),
                try await client.get("/api/sessions?clientId=\(BadRequest.uuid)"),
                try await client.get("/admin/stats"),
            ] {
                #expect(response.status == status)
                #expect(response.errorCode == code)
            }
            #expect(try await DevServerClient(server).createdCount("session") == 0)
        }
    }

    @Test func theTokenIsConfigurableAndTheBearerSchemeIsCaseInsensitive() async throws {
        var configuration = DevServerConfiguration()
        configuration.token = "s3cret"
        try await withDevServer(configuration) { server in
            var lowercase = DevServerClient(server)
            lowercase.authorization = "bearer s3cret"
            var defaultToken = DevServerClient(server)
            defaultToken.authorization = "Bearer dev-token"
            let statuses = [
                try await DevServerClient(server).post("/api/sessions", json: Bodies.session()).status,
                try await lowercase.post("/api/sessions", json: Bodies.session()).status,
                try await defaultToken.post("/api/sessions", json: Bodies.session()).status,
            ]
            #expect(statuses == [201, 201, 403])
        }
    }
}
