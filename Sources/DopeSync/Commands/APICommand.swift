import Foundation

/// `dopesync api`: which APIs the spool's checkpoints were recorded against, and the operator's
/// answer when a run refused a new API URL that has no lookups (``APIBinding``):
/// - `--same-as OLD`: the configured URL is the API that was at `OLD`, at a new address; what was
///   recorded against it holds there (its server ids are that API's).
/// - `--another-server`: the configured URL is another server; what was recorded elsewhere is
///   sent to it again (every record, once).
///
/// Exit 0; 64 for an `OLD` the store does not know; 78 for a spool bound to another store; 73 or
/// 75 when the store cannot be read or reached.
public enum APICommand {
    public enum Answer: Sendable, Equatable {
        case list
        case sameAs(String)
        case anotherServer
    }

    public static func run(spoolRoot: String, database: DatabaseSettings?, apiURL: String, answer: Answer) async
        -> CommandOutcome
    {
        let spool = Spool(root: spoolRoot)
        let url = APIAddress.normalized(apiURL)
        guard let database else {
            do {
                try await SpoolBinding.check(spool, store: .sqlite(spool), bindIfUnbound: false)
                guard FileManager.default.fileExists(atPath: spool.databasePath) else {
                    return CommandOutcome(
                        output: "no checkpoints yet: \(spool.databasePath) does not exist", status: .success)
                }
                let store = try CheckpointStore(spool: spool)
                return try answered(
                    answer, url: url, book: try store.apiBook(), store: "\(StoreIdentity.sqlite(spool))"
                ) { api in try store.recordAPIAddress(url, api: api, adoptUnbound: false) }
            } catch let error as SpoolBindingError {
                return CommandOutcome(output: "", diagnostics: "\(error)", status: error.exitStatus)
            } catch {
                return CommandOutcome(output: "", diagnostics: "\(error)", status: .cannotCreate)
            }
        }
        return await withSharedLedger(database) { store in
            do {
                let identity = try await store.storeIdentity()
                try await SpoolBinding.check(spool, store: identity, bindIfUnbound: false)
                let book = try await store.apiBook(countingSessions: true)
                var record: String? = nil
                let outcome = answered(answer, url: url, book: book, store: "\(identity)") { record = $0 }
                if let api = record { try await store.recordAPIAddress(url, api: api, adoptUnbound: false) }
                return outcome
            } catch let error as SpoolBindingError {
                return CommandOutcome(output: "", diagnostics: "\(error)", status: error.exitStatus)
            } catch {
                let status: ExitStatus =
                    (error as? CheckpointError)?.isUnreachable == true ? .temporaryFailure : .cannotCreate
                return CommandOutcome(output: "", diagnostics: "\(error)", status: status)
            }
        }
    }

    /// The answer's outcome; `record` is called with the API `url` is to be recorded as.
    private static func answered(
        _ answer: Answer, url: String, book: APIBook, store: String, record: (String) throws -> Void
    ) rethrows -> CommandOutcome {
        switch answer {
        case .list:
            return CommandOutcome(output: listing(book, url: url, store: store), status: .success)
        case .anotherServer:
            try record(url)
            let others = book.others(than: url).map(\.api)
            return CommandOutcome(
                output: "recorded: \(url) is an API of its own. "
                    + (others.isEmpty
                        ? "No checkpoint of another API is in \(store)."
                        : "What was recorded against \(others.joined(separator: ", ")) is sent to it again, once."),
                status: .success)
        case .sameAs(let old):
            let oldURL = APIAddress.normalized(old)
            guard let api = book.addresses[oldURL] ?? (book.sessions[oldURL] != nil ? oldURL : nil) else {
                let known = Set(book.addresses.values).union(book.sessions.keys.filter { $0 != APIBook.unbound })
                return CommandOutcome(
                    output: "",
                    diagnostics: "\(store) holds no checkpoints recorded against \(oldURL); the APIs it knows: "
                        + (known.isEmpty ? "none" : known.sorted().joined(separator: ", ")),
                    status: .usage)
            }
            try record(api)
            return CommandOutcome(
                output: "recorded: \(url) is \(api) at a new address; its \(book.sessions[api] ?? 0) sessions' "
                    + "checkpoints hold there, and nothing of them is sent again.",
                status: .success)
        }
    }

    private static func listing(_ book: APIBook, url: String, store: String) -> String {
        var lines = ["APIs whose checkpoints are in \(store) (the one configured now: \(url))"]
        let apis = Set(book.addresses.values).union(book.sessions.keys).sorted()
        for api in apis {
            let name = api == APIBook.unbound ? "(from before APIs were recorded)" : api
            let addresses = book.addresses.filter { $0.value == api && $0.key != api }.keys.sorted()
            let current = (book.addresses[url] ?? url) == api ? " (configured)" : ""
            lines.append(
                "  \(name)\(current): \(book.sessions[api] ?? 0) sessions"
                    + (addresses.isEmpty ? "" : "; also at \(addresses.joined(separator: ", "))"))
        }
        if apis.isEmpty { lines.append("  none yet") }
        return lines.joined(separator: "\n")
    }
}
