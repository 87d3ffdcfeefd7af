import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `dopesync check`: whether a run with these settings could work, without a bundle. One line per
/// check; the exit status is the one a run would end with for the first thing wrong (78 the
/// configuration or a URL that does not lead to the API, 77 the token refused, 76 TLS, 75 the API
/// unreachable, 73 the spool), 0 when everything holds.
///
/// What it asks the API: `GET /api/health` (is this the API?), then, with the token,
/// `GET /api/sessions?clientId=` and a fresh UUID, which no record has: it creates nothing.
public enum CheckCommand {
    /// One line of the report.
    public struct Line: Sendable, CustomStringConvertible {
        public var ok: Bool
        public var what: String
        public var detail: String
        public var description: String { "\(ok ? "ok  " : "FAIL") \(what): \(DisplayText.escaped(detail))" }
    }

    public static func run(settings: RunConfiguration, network: APIClient.Network) async -> CommandOutcome {
        var lines = [
            Line(
                ok: true, what: "configuration",
                detail: "api \(MaskedURL.string(settings.apiURL)), spool \(settings.spool), token read ("
                    + (settings.sources["token"].map { "from \($0)" } ?? "given") + ")")
        ]
        var status = ExitStatus.success
        func record(_ line: Line, failing: ExitStatus) {
            lines.append(line)
            if !line.ok && status == .success { status = failing }
        }
        let (apiLines, apiStatus) = await checkAPI(settings: settings, network: network)
        for line in apiLines { record(line, failing: apiStatus) }
        let (spool, floor, sqliteStore) = (Spool(root: settings.spool), settings.minFreeSpace, settings.database == nil)
        for line in await SpoolCalls.run({ checkSpool(spool, floor: floor, sqliteStore: sqliteStore) }) {
            record(line, failing: .cannotCreate)
        }
        let (storeLine, storeStatus) = await checkStore(Spool(root: settings.spool), database: settings.database)
        record(storeLine, failing: storeStatus)
        if let (metricsLine, metricsStatus) = checkMetricsFile(settings.metricsFile) {
            record(metricsLine, failing: metricsStatus)
        }
        record(checkClock(SystemClock.synchronization), failing: .success)
        return CommandOutcome(output: lines.map(\.description).joined(separator: "\n"), status: status)
    }

    /// The store: the one the spool is bound to (``SpoolBinding``), or, for a spool bound to none
    /// yet, the one its first run binds it to.
    static func checkStore(_ spool: Spool, database: DatabaseSettings?) async -> (Line, ExitStatus) {
        let bound: StoreIdentity?
        do {
            bound = try await SpoolBinding.read(spool)
        } catch {
            return (Line(ok: false, what: "store", detail: "\(error)"), error.exitStatus)
        }
        let state =
            bound == nil ? "the spool is bound to no store yet; the first run binds it to this one" : "the spool's own"
        guard let database else {
            if let refused = sqliteRefusal(spool, bound: bound) {
                return (Line(ok: false, what: "store", detail: refused.diagnostics ?? ""), refused.status)
            }
            return (Line(ok: true, what: "store", detail: "\(StoreIdentity.sqlite(spool)): \(state)"), .success)
        }
        return await checkDatabase(database, spool: spool, bound: bound, state: state)
    }

    /// The shared database as a run would find it, read without migrating it: reachable, this
    /// user and password taken, a schema this dopesync can use, the spool's store, and no SQLite
    /// checkpoints left behind unmigrated. Each failure names its fix and the run's exit code.
    static func checkDatabase(_ database: DatabaseSettings, spool: Spool, bound: StoreIdentity?, state: String) async
        -> (Line, ExitStatus)
    {
        func failed(_ detail: String, _ status: ExitStatus) -> (Line, ExitStatus) {
            (Line(ok: false, what: "store", detail: detail + " (a run exits \(status.rawValue))"), status)
        }
        let found: PostgresSchema.Found
        do {
            found = try await PostgresSchema.inspect(database, timeout: .seconds(10), logger: SpoolStatus.commandLogger)
        } catch {
            let status = error.exitStatusWhenUnusable
            switch error.code {
            case .unreachable:
                return failed(
                    "\(error.message): is PostgreSQL up, and are the host and port in `database:` right?", status)
            case .refused:
                return failed(
                    "\(error.message): check the user in `database:` and the password "
                        + "(DOPESYNC_DATABASE_PASSWORD or `database-password-file:`)", status)
            default:
                return failed("cannot use the checkpoint database \(database.url): \(error)", status)
            }
        }
        if let tooNew = found.tooNew {
            return failed("\(database.url): \(tooNew.message)", tooNew.exitStatusWhenUnusable)
        }
        if let bound {
            let store = StoreIdentity(kind: .postgresql, id: found.storeID, name: database.url)
            if !bound.isSame(as: store) {
                return failed("\(SpoolBinding.mismatch(spool, bound: bound, given: store))", .configuration)
            }
        } else {
            let migrate = "`dopesync migrate --to \(database.url) --spool \(spool.root)`"
            switch Result(catching: { () throws(CheckpointError) in try CheckpointStore.holdsUnmigratedSteps(spool) }) {
            case .success(false): break
            case .success(true):
                return failed(
                    "\(spool.databasePath) holds checkpoints never migrated to \(database.url): a run would refuse them; "
                        + "copy them first with \(migrate)", .configuration)
            case .failure(let error):
                return failed(
                    "cannot tell whether \(spool.databasePath) holds checkpoints never migrated (\(error)); a run would "
                        + "refuse it until it can be read, and \(migrate) copies what it holds", .cannotCreate)
            }
        }
        let schema =
            found.applied.isEmpty
            ? "no dopesync schema yet: the first run creates it"
            : found.missing.isEmpty
                ? "schema at \(found.applied.last ?? "")"
                : "schema at \(found.applied.last ?? ""): the next run applies \(found.missing.joined(separator: ", "))"
        return (
            Line(ok: true, what: "store", detail: "the PostgreSQL database \(database.url): \(schema); \(state)"),
            .success
        )
    }

    /// The metrics file's folder: a run that cannot write there logs an error and goes on, and the
    /// alerts then read the last file written for good. Checked as the user `check` runs as.
    static func checkMetricsFile(_ path: String?) -> (Line, ExitStatus)? {
        guard let path else { return nil }
        // The folder a run writes its temporary file in, then renames it within.
        let directory = FileSystem.directory(of: path)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue
        else {
            return (
                Line(
                    ok: false, what: "metrics",
                    detail: "\(directory) (the folder of metrics-file: \(path)) does not exist: create it, or point "
                        + "metrics-file: at node-exporter's textfile folder"), .cannotCreate
            )
        }
        guard access(directory, W_OK | X_OK) == 0 else {
            let why = FileSystem.whyNotWritable(directory, error: errno) { user in
                "give \(user) write access (on Debian's node-exporter folder: setfacl -m u:\(user):rwx \(directory))"
            }
            return (
                Line(
                    ok: false, what: "metrics",
                    detail: "runs would leave metrics-file: \(path) as it is: \(why)"), .cannotCreate
            )
        }
        return (Line(ok: true, what: "metrics", detail: "\(directory) is writable: \(path)"), .success)
    }

    /// Whether NTP keeps the clock: what lets a run date again the times stored under a wrong one
    /// (a kiosk that booted with its date wrong; docs/spool.md). Never a failure: a run works
    /// either way, and keeps those times as they are.
    static func checkClock(_ synchronization: SystemClock.Synchronization) -> Line {
        let detail =
            switch synchronization {
            case .synchronized:
                "synchronized (NTP): times stored while it was wrong are dated again when found"
            case .notSynchronized:
                "not synchronized (no NTP daemon keeps it, or not yet): times stored while it was wrong "
                    + "are kept as they are; chrony or systemd-timesyncd would keep it"
            case .unknown(let errno):
                "cannot tell whether NTP keeps it (adjtimex: \(String(cString: strerror(errno))); a sandbox, "
                    + "such as systemd's ProtectClock=, refuses it): times stored while it was wrong are kept as "
                    + "they are; allow adjtimex (jobs/systemd/dopesync.service does)"
            }
        return Line(ok: true, what: "clock", detail: detail)
    }

    /// Is the URL the API's, and does it take the token?
    static func checkAPI(settings: RunConfiguration, network: APIClient.Network) async -> ([Line], ExitStatus) {
        let result = try? await APIClient.with(
            baseURL: settings.apiURL, credential: Credential(token: settings.token), connections: 1, network: network
        ) { client in
            await probe(client)
        }
        return result ?? ([Line(ok: false, what: "api", detail: "the HTTP client could not start")], .software)
    }

    /// The two requests of the check, on `client`: also what an idle run asks, so that a run with
    /// nothing to do still finds a wrong URL, a refused token or an API that is down.
    static func probe(_ client: APIClient) async -> ([Line], ExitStatus) {
        do {
            var lines: [Line] = []
            let url = MaskedURL.string(client.baseURL)
            switch await client.get("/api/health") {
            case .found(let body):
                guard (try? JSONValue.parse(body))?.objectValue != nil else {
                    return (
                        [
                            Line(
                                ok: false, what: "api",
                                detail: "\(url)/api/health answered 200 but not with JSON: not the API")
                        ],
                        .configuration
                    )
                }
                lines.append(Line(ok: true, what: "api", detail: "\(url)/api/health answers"))
            case .notFound(let status):
                return (
                    [
                        Line(
                            ok: false, what: "api",
                            detail: "\(url)/api/health answered \(status): the URL does not lead to the API "
                                + "(one path segment too many or too few?)")
                    ], .configuration
                )
            case .failed(let response):
                return ([Line(ok: false, what: "api", detail: describe(response))], exitStatus(of: response))
            }
            switch await client.get(APIClient.lookupOfNoRecord) {
            case .found:
                lines.append(Line(ok: true, what: "token", detail: "accepted (an authenticated lookup answered)"))
            case .notFound(let status):
                lines.append(
                    Line(
                        ok: true, what: "token",
                        detail: "not verified: the API answered \(status) to the session lookup (it has none); "
                            + "it is first used by a run's first upload"))
            case .failed(let response):
                lines.append(Line(ok: false, what: "token", detail: describe(response)))
                return (lines, exitStatus(of: response))
            }
            return (lines, .success)
        }
    }

    static func describe(_ response: StepResponse) -> String {
        switch response {
        case .unauthorized(let status, let message): "refused (\(status)): \(message)"
        case .notTrusted(let message), .misdirected(let message), .imageUnreadable(let message),
            .bundleReadFailed(let message):
            message
        case .retryable(let status, _, let message): "\(status.map { "HTTP \($0): " } ?? "")\(message)"
        case .rejected(let status, _, let message, _): "HTTP \(status): \(message)"
        case .created(let id, _): "answered a create (id \(id)) to a GET"
        }
    }

    /// The exit status a run would end with for this answer.
    static func exitStatus(of response: StepResponse) -> ExitStatus {
        switch response {
        case .unauthorized: .permissionDenied
        case .notTrusted: .apiNotTrusted
        case .misdirected, .rejected, .created: .configuration
        case .retryable, .imageUnreadable, .bundleReadFailed: .temporaryFailure
        }
    }

    /// The spool's SQLite file: this user's own, or not made yet.
    static func checkSQLiteFile(_ spool: Spool) -> Line {
        do {
            try DatabaseOwnership.check(path: spool.databasePath, lockPath: spool.databaseLockPath)
        } catch {
            return Line(ok: false, what: "database", detail: error.message)
        }
        let exists = FileManager.default.fileExists(atPath: spool.databasePath)
        return Line(
            ok: true, what: "database",
            detail: exists ? "\(spool.databasePath) is this user's own" : "not created yet (the first run makes it)")
    }

    /// The spool: there, the folders writable, owned by this user, the database its own; free space.
    /// `sqliteStore`: whether the checkpoints are the spool's SQLite file (no `database:`); its
    /// line is then checked here, else the store's line names the database.
    static func checkSpool(_ spool: Spool, floor: FreeSpaceFloor, sqliteStore: Bool) -> [Line] {
        var info = stat()
        guard stat(spool.root, &info) == 0 else {
            return [
                Line(
                    ok: false, what: "spool", detail: "\(spool.root) does not exist (run creates none: --create-spool)")
            ]
        }
        var lines: [Line] = []
        do {
            try spool.checkBeforeWriting(mayCreate: false, allowRoot: false)
            let me = FileSystem.userName(geteuid())
            let owner = FileSystem.userName(info.st_uid)
            lines.append(
                Line(
                    ok: true, what: "spool",
                    detail: "\(spool.root), owner \(owner), mode \(FileSystem.octal(info.st_mode & 0o7777)); "
                        + "running as \(me)"))
        } catch {
            return [Line(ok: false, what: "spool", detail: "\(error)")]
        }
        let missing = Spool.Folder.allCases.filter { !FileManager.default.fileExists(atPath: spool.path($0)) }
        let unwritable = Spool.Folder.allCases.compactMap { folder -> (Spool.Folder, Int32)? in
            guard !missing.contains(folder), access(spool.path(folder), W_OK | X_OK) != 0 else { return nil }
            return (folder, errno)
        }
        if let (first, error) = unwritable.first {
            lines.append(
                Line(
                    ok: false, what: "folders",
                    detail: "not writable by \(FileSystem.userName(geteuid())): "
                        + unwritable.map(\.0.rawValue).joined(separator: ", ") + "; "
                        + Spool.notWritableMessage(spool.path(first), error: error)))
        } else {
            let made =
                missing.isEmpty
                ? "" : " (\(missing.map(\.rawValue).joined(separator: ", ")) not there yet: a run makes them)"
            lines.append(Line(ok: true, what: "folders", detail: "writable\(made)"))
        }
        if sqliteStore { lines.append(checkSQLiteFile(spool)) }
        if let space = FileSystemSpace(of: spool.root) {
            let detail = "\(ByteCount(space.free)) free, floor \(floor) (min-free-space)"
            lines.append(
                space.isBelow(floor)
                    ? Line(ok: false, what: "free space", detail: detail + ": below it a run claims nothing")
                    : Line(ok: true, what: "free space", detail: detail))
        }
        return lines
    }
}
