import DopeSyncBundle
import DopeSyncSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A checkpoint store, as a spool's binding names it.
public struct StoreIdentity: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        case sqlite, postgresql
    }
    public var kind: Kind
    /// A PostgreSQL store's own id, made with its schema (`dopesync.store_meta`): it survives a
    /// rename of the database's host, a dump and restore, a `pg_upgrade`. Nil for the spool's own
    /// SQLite file, which is the store whatever file is there now (a lost one is made anew).
    public var id: String?
    /// How a person names it: the file's path, or the database's URL (never its password).
    public var name: String

    public init(kind: Kind, id: String?, name: String) {
        self.kind = kind
        self.id = id
        self.name = name
    }

    /// The spool's own SQLite file.
    public static func sqlite(_ spool: Spool) -> StoreIdentity {
        StoreIdentity(kind: .sqlite, id: nil, name: spool.databasePath)
    }

    public var description: String {
        switch kind {
        case .sqlite: "the SQLite file \(name)"
        case .postgresql: "the PostgreSQL database \(name) (store \(id ?? "?"))"
        }
    }

    /// Whether both name the one store: the same kind, and for PostgreSQL the same id (its URL
    /// may differ from host to host).
    public func isSame(as other: StoreIdentity) -> Bool {
        kind == other.kind && (kind == .sqlite || id == other.id)
    }
}

/// Why a spool's store cannot be used.
public struct SpoolBindingError: Error, Sendable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// The spool is bound to another store than the one given.
        case otherStore = "other_store"
        /// The binding file cannot be read, written or understood.
        case unreadable
    }
    public let code: Code
    public let message: String
    /// The binding file.
    public let path: String

    package init(code: Code, message: String, path: String) {
        (self.code, self.message, self.path) = (code, message, path)
    }

    public var description: String { message }

    /// 78 for a store that is not the spool's (a configuration mistake), 73 for a file the spool
    /// cannot give.
    public var exitStatus: ExitStatus { code == .otherStore ? .configuration : .cannotCreate }
}

/// Which store holds a spool's checkpoints, as the spool itself says in `SPOOL/dopesync.store`.
///
/// Two stores on one spool each believe they alone claim its bundles and record its steps; a
/// host whose job file forgot `database:` would take bundles the others hold and send records
/// twice. So the first run binds the spool to its store, every command checks the binding before
/// it claims or changes anything, and only `dopesync migrate` changes it.
public enum SpoolBinding {
    public static let fileName = "dopesync.store"

    public static func path(_ spool: Spool) -> String { spool.root + "/" + fileName }

    /// The store the spool is bound to; nil when it is bound to none yet (a new spool, or one
    /// from a version before bindings).
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public static func read(_ spool: Spool) throws(SpoolBindingError) -> StoreIdentity? {
        let path = path(spool)
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch CocoaError.fileReadNoSuchFile {
            // Absent, as the read itself found it: a second look (does it exist now?) took a file
            // another run linked into place in between for one that cannot be read.
            return nil
        } catch {
            throw SpoolBindingError(code: .unreadable, message: "cannot read \(path): \(error)", path: path)
        }
        var fields: [String: String] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[String(line[..<colon])] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        guard let kind = fields["store"].flatMap(StoreIdentity.Kind.init(rawValue:)), let name = fields["name"],
            kind == .sqlite || fields["id"] != nil
        else {
            throw SpoolBindingError(
                code: .unreadable,
                message: "\(path) does not say which store holds this spool's checkpoints "
                    + "(it needs `store: sqlite` or `store: postgresql` with `id:` and `name:`); "
                    + "`dopesync migrate` writes it anew", path: path)
        }
        return StoreIdentity(kind: kind, id: fields["id"], name: name)
    }

    /// Refuses a store that is not the spool's, naming both and the fix. A spool bound to none
    /// is bound to `store` when `bindIfUnbound` (a run), else left so (a command that only reads
    /// or moves files). Returns whether the spool was bound before.
    @discardableResult
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public static func check(_ spool: Spool, store: StoreIdentity, bindIfUnbound: Bool) throws(SpoolBindingError)
        -> Bool
    {
        if let bound = try read(spool) {
            guard bound.isSame(as: store) else { throw mismatch(spool, bound: bound, given: store) }
            return true
        }
        guard bindIfUnbound else { return false }
        switch write(spool, store, replacing: false) {
        case .written: return false
        case .failed(let error): throw error
        case .alreadyBound:
            // Another process bound it first: its store must be this one too.
            return try check(spool, store: store, bindIfUnbound: false)
        }
    }

    /// Binds the spool to `store`, whatever it was bound to: `dopesync migrate` alone.
    @available(*, noasync, message: "blocks on the spool's file system: call it through SpoolCalls")
    public static func rebind(_ spool: Spool, to store: StoreIdentity) throws(SpoolBindingError) {
        if case .failed(let error) = write(spool, store, replacing: true) { throw error }
    }

    /// The refusal of `given` by a spool bound to `bound`, with the fix.
    package static func mismatch(_ spool: Spool, bound: StoreIdentity, given: StoreIdentity) -> SpoolBindingError {
        let fix: String
        switch (bound.kind, given.kind) {
        case (.sqlite, _):
            fix =
                "To move the spool's checkpoints into that database, stop the runs on the spool and run "
                + "`dopesync migrate --to \(given.name) --spool \(spool.root)`; if this host is not meant to share the "
                + "spool through PostgreSQL, remove `database:` from its job file (and --database, $DOPESYNC_DATABASE_URL)."
        case (.postgresql, .sqlite):
            fix =
                "Give this host the spool's database: `database: \(bound.name)` in its job file (or --database, "
                + "$DOPESYNC_DATABASE_URL)."
        case (.postgresql, .postgresql):
            fix =
                "Give this host the spool's database (`database: \(bound.name)`, the same database under whatever "
                + "address this host reaches it). Only if that database is lost for good and this one replaces it: "
                + "`dopesync migrate --to \(given.name) --spool \(spool.root) --rebind`."
        }
        return SpoolBindingError(
            code: .otherStore,
            message: "this spool's checkpoints are in \(bound), as \(path(spool)) says, but this command was given "
                + "\(given): it refuses to use it, and claims and changes nothing (two stores on one spool send records "
                + "twice). \(fix)", path: path(spool))
    }

    private enum Written {
        case written, alreadyBound
        case failed(SpoolBindingError)
    }

    /// Writes the binding into a file of its own, synced, then links it into place (no replacing:
    /// two runs binding at once, the second finds the first's) or renames it there (replacing).
    private static func write(_ spool: Spool, _ store: StoreIdentity, replacing: Bool) -> Written {
        let target = path(spool)
        let temporary = spool.root + "/.\(fileName).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        var text = "# dopesync: the store that holds this spool's checkpoints. Only `dopesync migrate` changes it.\n"
        text += "store: \(store.kind.rawValue)\n"
        if let id = store.id { text += "id: \(id)\n" }
        text += "name: \(store.name)\nbound_at: \(Date().formatted(.iso8601))\n"
        func failure(_ doing: String, _ code: Int32) -> Written {
            unlink(temporary)
            return .failed(
                SpoolBindingError(
                    code: .unreadable, message: "cannot \(doing) \(target): \(String(cString: strerror(code)))",
                    path: target))
        }
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { return failure("write", errno) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
        let synced = written == bytes.count && fsync(descriptor) == 0
        let code = errno
        close(descriptor)
        guard synced else { return failure("write", written < 0 ? code : EIO) }
        if replacing {
            guard rename(temporary, target) == 0 else { return failure("replace", errno) }
            return .written
        }
        defer { unlink(temporary) }
        guard link(temporary, target) == 0 else {
            let code = errno
            return code == EEXIST ? .alreadyBound : failure("write", code)
        }
        return .written
    }
}
