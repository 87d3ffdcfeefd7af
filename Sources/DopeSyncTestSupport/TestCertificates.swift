import Foundation

/// A throwaway certificate authority and server certificates signed by it, made with `openssl`
/// in a folder of their own: what an operator's private CA looks like to dopesync.
public struct TestCertificates: Sendable {
    /// The CA's certificate (PEM): what `--ca-file` is given.
    public let caCertificatePath: String
    /// A server certificate for `127.0.0.1` and `localhost`, signed by the CA.
    public let serverCertificatePath: String
    public let serverKeyPath: String
    /// A certificate signed by the same CA for another host only (`api.elsewhere.test`).
    public let otherHostCertificatePath: String
    public let otherHostKeyPath: String

    /// Makes the CA and both server certificates under `folder` (which must exist).
    public init(in folder: URL) async throws {
        func path(_ name: String) -> String { folder.appendingPathComponent(name).path }
        caCertificatePath = path("ca.pem")
        serverCertificatePath = path("server.pem")
        serverKeyPath = path("server-key.pem")
        otherHostCertificatePath = path("other.pem")
        otherHostKeyPath = path("other-key.pem")
        try await runProcess(
            "openssl",
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", path("ca-key.pem"), "-out", caCertificatePath, "-days", "2",
                "-subj", "/CN=dopesync test CA", "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            ])
        try await Self.issue(
            subjectAltName: "IP:127.0.0.1,DNS:localhost", certificate: serverCertificatePath, key: serverKeyPath,
            folder: folder)
        try await Self.issue(
            subjectAltName: "DNS:api.elsewhere.test", certificate: otherHostCertificatePath, key: otherHostKeyPath,
            folder: folder)
    }

    private static func issue(subjectAltName: String, certificate: String, key: String, folder: URL) async throws {
        let request = folder.appendingPathComponent("request.csr").path
        let extensions = folder.appendingPathComponent("extensions.cnf")
        try Data("subjectAltName=\(subjectAltName)\nextendedKeyUsage=serverAuth\n".utf8).write(to: extensions)
        try await runProcess(
            "openssl",
            [
                "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
                "-out", request, "-subj", "/CN=dopesync test server",
            ])
        try await runProcess(
            "openssl",
            [
                "x509", "-req", "-in", request, "-CA", folder.appendingPathComponent("ca.pem").path,
                "-CAkey", folder.appendingPathComponent("ca-key.pem").path, "-CAcreateserial", "-out", certificate,
                "-days", "2", "-extfile", extensions.path,
            ])
    }
}
