import DopeSyncDevServer
import DopeSyncTestSupport
import Foundation
import Testing

@Suite struct ImageTests {
    @Test(arguments: [
        ("jpeg", SampleImages.jpeg, "image/jpeg"), ("png", SampleImages.png, "image/png"),
        ("heic", SampleImages.heic, "image/heic"), ("webp", SampleImages.webp, "image/webp"),
    ])
    func eachImageTypeIsRecognisedByItsBytes(_ name: String, _ bytes: [UInt8], _ contentType: String) async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let group = try await client.makeGroup()
            let response = try await client.postImage(
                group: group.id, clientId: group.clientId, fileName: "x.\(name)", bytes: bytes)
            #expect(response.status == 201)
            #expect(response.json["clientId"] as? String == group.clientId)
        }
    }

    @Test func anythingElseIs415() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let group = try await client.makeGroup()
            let response = try await client.postImage(
                group: group.id, clientId: group.clientId, bytes: SampleImages.text)
            #expect(response.status == 415)
            #expect(response.errorCode == "unsupported_media_type")
            let empty = try await client.postImage(group: group.id, clientId: group.clientId, bytes: [])
            #expect(empty.status == 415)
            let notMultipart = try await client.post("/api/groups/\(group.id)/images", json: "{}")
            #expect(notMultipart.status == 415)
            #expect(try await client.createdCount("image") == 0)
        }
    }

    @Test func aFileAboveTheLimitIs413() async throws {
        var configuration = DevServerConfiguration()
        configuration.maxImageBytes = 4096
        try await withDevServer(configuration) { server in
            let client = DevServerClient(server)
            let group = try await client.makeGroup()
            let atLimit = SampleImages.jpeg + Array(repeating: 0, count: 4096 - SampleImages.jpeg.count)
            #expect(try await client.postImage(group: group.id, clientId: group.clientId, bytes: atLimit).status == 201)
            let justAbove = try await client.postImage(group: group.id, clientId: group.clientId, bytes: atLimit + [0])
            #expect(justAbove.status == 413)
            #expect(justAbove.errorCode == "payload_too_large")
            // Far above: refused from Content-Length, before the body is read.
            let farAbove = try await client.postImage(
                group: group.id, clientId: group.clientId,
                bytes: SampleImages.jpeg + Array(repeating: 0, count: 1 << 20))
            #expect(farAbove.status == 413)
            #expect(try await client.createdCount("image") == 1)
        }
    }

    @Test(arguments: ["clientId", "role", "fileName", "file"])
    func aMissingPartIs422NamingIt(_ part: String) async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let group = try await client.makeGroup()
            let response = try await client.postImage(
                group: group.id, clientId: group.clientId, bytes: SampleImages.png, omit: [part])
            #expect(response.status == 422)
            #expect(response.errorCode == "validation_failed")
            #expect(response.errorField == part)
        }
    }

    @Test func roleMustBeOneOfThree() async throws {
        try await withDevServer { server in
            let client = DevServerClient(server)
            let group = try await client.makeGroup()
            for role in ["photo", "original", "annotated"] {
                #expect(
                    try await client.postImage(
                        group: group.id, clientId: group.clientId, role: role, bytes: SampleImages.png
                    ).status == 201)
            }
            let bad = try await client.postImage(
                group: group.id, clientId: group.clientId, role: "thumbnail", bytes: SampleImages.png)
            #expect(bad.status == 422)
            #expect(bad.errorField == "role")
        }
    }
}
