import Foundation

/// Mounts with `mount ARGUMENTS FOLDER`, runs `body`, then unmounts `folder` whatever `body` did:
/// lazily (`umount -l`) if something still uses it, so a test that failed with a file open there
/// leaves no mount behind. Needs root.
///
/// Both through ``runProcess(_:_:in:environment:stdin:allowFailure:)``, never Foundation's
/// `Process`, whose `waitUntilExit()` on the cooperative pool was seen never to return under the
/// test runner: one such wait in a `defer` holds a thread of the two, and the test, for good.
public func withMount<T>(
    _ arguments: [String], on folder: URL, _ body: () async throws -> T
) async throws -> T {
    try await runProcess("mount", arguments + [folder.path])
    do {
        let result = try await body()
        try await uncancelled { try await unmount(folder) }
        return result
    } catch {
        _ = try? await uncancelled { try await unmount(folder) }
        throw error
    }
}

/// Unmounts `folder`, lazily if it is busy; returns whether the plain unmount worked.
@discardableResult
func unmount(_ folder: URL) async throws -> Bool {
    if try await runProcess("umount", [folder.path], allowFailure: true).status == 0 { return true }
    try await runProcess("umount", ["-l", folder.path], allowFailure: true)
    return false
}
