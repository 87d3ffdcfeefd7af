import DopeSyncBundle
import DopeSyncSupport
import Foundation

/// A step whose response arrived: what the planner needs to skip it and to notice a changed record.
public struct CompletedStep: Sendable, Hashable {
    /// The id the server gave the record.
    public let serverID: Int64
    /// The hex SHA-256 of the record's content as it was uploaded.
    public let contentDigest: String
    public let doneAt: Date

    public init(serverID: Int64, contentDigest: String, doneAt: Date) {
        self.serverID = serverID
        self.contentDigest = contentDigest
        self.doneAt = doneAt
    }
}

/// One step as the database knows it, for `inspect` and for tests.
public struct StepRecord: Sendable, Hashable {
    public enum State: String, Sendable {
        /// The intent is recorded: the request may or may not have reached the server.
        case sent
        /// The response arrived and its server id is recorded: never sent again.
        case done
    }
    public let sessionID: String
    public let stepKey: String
    public let idempotencyKey: String
    public let requestFingerprint: String
    public let contentDigest: String
    public let state: State
    public let serverID: Int64?
    public let sentAt: Date
    public let doneAt: Date?
    /// The bundle that last recorded this step's intent.
    public let bundleName: String?

    package init(
        sessionID: String, stepKey: String, idempotencyKey: String, requestFingerprint: String, contentDigest: String,
        state: State, serverID: Int64?, sentAt: Date, doneAt: Date?, bundleName: String?
    ) {
        self.sessionID = sessionID
        self.stepKey = stepKey
        self.idempotencyKey = idempotencyKey
        self.requestFingerprint = requestFingerprint
        self.contentDigest = contentDigest
        self.state = state
        self.serverID = serverID
        self.sentAt = sentAt
        self.doneAt = doneAt
        self.bundleName = bundleName
    }
}

/// What ``CheckpointStore/recordIntent(sessionID:stepKey:idempotencyKey:requestFingerprint:contentDigest:bundleName:now:)`` found.
public enum StepIntentOutcome: Sendable, Hashable {
    /// First intent for this step.
    case recorded
    /// The step was sent before (its response never arrived); its previous fingerprint is given so the
    /// caller can tell a byte-identical resend from a changed request (which a server rejects with
    /// `idempotency_key_reused`).
    case resent(previousFingerprint: String)
    /// The step is already done (for example by another bundle of the same session in another run):
    /// do not send it; nothing was changed.
    case alreadyDone(CompletedStep)
}

/// The stable code of why a bundle failed or was deferred: `reason:` in `failed/NAME.error`,
/// `last_error_reason` in the checkpoint database, what `status` shows. Made only from what it
/// names (a ``BundleError/Code``, an HTTP status, a failure of the upload); a reason read back
/// from a sidecar or the database is kept as written, even one this version has no name for.
public struct FailureReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// The bundle was refused by validation (the code of its first problem).
    public init(_ code: BundleError.Code) { self.init(rawValue: code.description) }
    /// The API answered this status for good (4xx), or kept answering it (5xx, 429) until the
    /// retries ran out: `http_422`.
    public static func http(_ status: Int) -> FailureReason { FailureReason(rawValue: "http_\(status)") }

    /// A step's record is already on the server (or checkpointed) with other content.
    public static let changedAfterUpload = FailureReason(rawValue: "changed_after_upload")
    /// The bundle's bytes are no longer those validated (an image read back differs, or holds the
    /// multipart boundary): someone wrote to it after validation.
    public static let changedAfterValidation = FailureReason(rawValue: "changed_after_validation")
    /// A 2xx answer to a create that did not name the record sent (its `clientId`) with a positive
    /// `id`, each time it was tried: not recorded as created.
    public static let unconfirmedCreate = FailureReason(rawValue: "unconfirmed_create")
    /// Deferred as many times, or for as long, as the deferral policy allows: the message names
    /// the last error (its step and HTTP status stay beside it).
    public static let gaveUp = FailureReason(rawValue: "gave_up")
    /// The bundle names an id (a rifle setup, location, ammunition or ammo lot) that the server's
    /// reference list does not hold: found before anything of it was sent.
    public static let unknownReference = FailureReason(rawValue: "unknown_reference")
    /// No HTTP answer at all after the retries (refused, reset, timed out).
    public static let unreachable = FailureReason(rawValue: "unreachable")
    /// The bundle names a session that another producer (another file owner) sent first.
    public static let sessionOfAnotherProducer = FailureReason(rawValue: "session_of_another_producer")

    /// Every reason with a name (not `http_NNN`), for the reference docs' test: the upload's,
    /// and each validation code.
    public static var named: [FailureReason] {
        [
            .changedAfterUpload, .changedAfterValidation, .unconfirmedCreate, .gaveUp, .unknownReference,
            .unreachable, .sessionOfAnotherProducer,
        ]
            // A reading stopped by the run, or a file replaced after its claim, is never the
            // bundle's failure: it is given back, or left where it is.
            + BundleError.Code.all.filter { $0 != .readingStopped && $0 != .replacedAfterClaim }
            .map(FailureReason.init)
    }
}

/// Why a bundle was deferred or failed: stored in the database and written to `failed/NAME.error`.
public struct BundleFailure: Sendable, Hashable {
    /// A short stable code (`invalid_session`, `changed_after_upload`, `http_422`, `unreachable`, ...).
    public var reason: FailureReason
    /// The step key that failed, when an upload step failed.
    public var step: String?
    public var httpStatus: Int?
    /// The bundle's field or entry at fault, when one is: `dope[2].ammunitionId`, an entry name.
    public var field: String?
    /// The validation error or the server's message.
    public var message: String?

    public init(
        reason: FailureReason, step: String? = nil, httpStatus: Int? = nil, field: String? = nil, message: String? = nil
    ) {
        self.reason = reason
        self.step = step
        self.httpStatus = httpStatus
        self.field = field
        self.message = message
    }

    /// A bundle of `bundle`'s naming `sessionID`, which `first` sent first: refused before anything
    /// of it is sent, naming both owners.
    public static func sessionOfAnotherProducer(_ sessionID: String, first: Producer, bundle: Producer)
        -> BundleFailure
    {
        BundleFailure(
            reason: .sessionOfAnotherProducer, field: "session.id",
            message: "session \(sessionID) was first sent by \(first), and this bundle belongs to \(bundle): a session "
                + "belongs to the producer that first sent it, so nothing of this bundle was sent. If \(bundle) is meant "
                + "to add to that session, \(first.name) must drop the bundle; otherwise give the session a new id")
    }
}

/// Who holds a claim: enough for `status` to show the owner and for a person to find the process.
public struct ClaimOwner: Sendable, Hashable {
    public var host: String
    public var pid: Int32
    public var runID: String

    public init(host: String, pid: Int32, runID: String) {
        self.host = host
        self.pid = pid
        self.runID = runID
    }

    /// This process, on this host, in the run `runID`.
    public static func current(runID: String) -> ClaimOwner {
        ClaimOwner(host: hostName, pid: ProcessInfo.processInfo.processIdentifier, runID: runID)
    }

    /// The name this host goes by in claims and runs: `DOPESYNC_HOST` when set (hosts whose
    /// names are alike, containers), else the machine's host name. Read once per process:
    /// Foundation's `hostName` may ask the resolver (a blocking call, once on an event loop for
    /// every claim), and copying the environment each time cost more than the claim's commit.
    public static let hostName: String = {
        if let name = getenv("DOPESYNC_HOST").map({ String(cString: $0) }), !name.isEmpty { return name }
        return ProcessInfo.processInfo.hostName
    }()
}

/// A claim recorded in the database. A claim whose run died stays until the bundle is taken back;
/// `status` can tell by the bundle still being in `processing/` with its lock free.
public struct ClaimRecord: Sendable, Hashable {
    public let bundleName: String
    public let owner: ClaimOwner
    public let claimedAt: Date
    /// When the claim's lease runs out, on the shared database's clock (nil: a flock on one
    /// host, held for as long as its process lives).
    public var leaseExpiresAt: Date? = nil
    /// The shared database's clock when the claims were read (to tell a lease's age and time left).
    public var readAt: Date? = nil

    package init(
        bundleName: String, owner: ClaimOwner, claimedAt: Date, leaseExpiresAt: Date? = nil, readAt: Date? = nil
    ) {
        self.bundleName = bundleName
        self.owner = owner
        self.claimedAt = claimedAt
        self.leaseExpiresAt = leaseExpiresAt
        self.readAt = readAt
    }
}

/// The last thing that happened to a bundle.
public struct BundleOutcome: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public static let claimed = BundleOutcome(rawValue: "claimed")
    public static let deferred = BundleOutcome(rawValue: "deferred")
    /// Given back to `incoming/` without counting an attempt (401/403, shutdown, circuit breaker).
    public static let returned = BundleOutcome(rawValue: "returned")
    public static let failed = BundleOutcome(rawValue: "failed")
    public static let done = BundleOutcome(rawValue: "done")
    /// `requeue`: back from `failed/` with a fresh attempt count.
    public static let requeued = BundleOutcome(rawValue: "requeued")
    public var description: String { rawValue }

    /// The outcomes after which a bundle's row belongs to a file that has left the queue (in
    /// `done/` or `failed/`; `requeue` marks one it brings back as `requeued`): a bundle claimed
    /// under the same name is another file, and starts afresh (attempts, first seen, readings cut
    /// short), as an SQL list for both stores.
    public static let finishedSQL = "('done', 'failed')"
}

/// The retry bookkeeping of one bundle, keyed by its file name in the spool.
public struct BundleState: Sendable, Hashable {
    public let name: String
    public let sessionID: String?
    /// Deferrals counted since it was first seen or last requeued.
    public let attempts: Int
    /// When this bundle was first claimed (or requeued): the clock of the max-age rule.
    public let firstSeen: Date
    /// The same instant on the boot's clock, recorded when the wall clock was not synchronized
    /// (``ClockFacts/firstSightStamp``): the max-age rule counts from it instead.
    public let firstSeenOnBoot: BootInstant?
    public let nextAttemptAt: Date?
    public let lastError: BundleFailure?
    public let lastOutcome: BundleOutcome?
    public let updatedAt: Date
    /// Steps of this bundle's session done, counted when one bundle's row is read (nil in lists):
    /// what a resumed upload skips.
    public let stepsDone: Int?
    /// Steps in the bundle's plan, when the run loop recorded it.
    public let stepsTotal: Int?

    package init(
        name: String, sessionID: String?, attempts: Int, firstSeen: Date, firstSeenOnBoot: BootInstant? = nil,
        nextAttemptAt: Date?, lastError: BundleFailure?, lastOutcome: BundleOutcome?, updatedAt: Date, stepsDone: Int?,
        stepsTotal: Int?
    ) {
        self.name = name
        self.sessionID = sessionID
        self.attempts = attempts
        self.firstSeen = firstSeen
        self.firstSeenOnBoot = firstSeenOnBoot
        self.nextAttemptAt = nextAttemptAt
        self.lastError = lastError
        self.lastOutcome = lastOutcome
        self.updatedAt = updatedAt
        self.stepsDone = stepsDone
        self.stepsTotal = stepsTotal
    }
}

/// What ``CheckpointStore/recordDeferral(name:sessionID:error:now:policy:)`` decided.
public struct Deferral: Sendable, Hashable {
    /// Attempts counted so far, this one included.
    public let attempts: Int
    /// When the bundle is due again: also the mtime to give it in `incoming/`.
    public let nextAttemptAt: Date
    /// When the bundle was first seen, as the max-age rule counts it.
    public let firstSeen: Date
    /// Seconds since then.
    public let age: TimeInterval
    /// The policy's attempts or age are used up: the caller moves the bundle to `failed/` instead.
    public let exhausted: Bool
    /// The store records `firstSeen` as it is here and drops the first sight's boot stamp: it was
    /// dated again, or the stamp, of another boot, says nothing more
    /// (``DeferralPolicy/deferral(attempts:firstSeen:firstSeenOnBoot:now:nowOnBoot:clockIsSynchronized:)``).
    public let firstSeenDatedAgain: Bool

    public init(
        attempts: Int, nextAttemptAt: Date, firstSeen: Date, age: TimeInterval, exhausted: Bool,
        firstSeenDatedAgain: Bool = false
    ) {
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.firstSeen = firstSeen
        self.age = age
        self.exhausted = exhausted
        self.firstSeenDatedAgain = firstSeenDatedAgain
    }
}

/// One `dopesync run`, for `status`.
public struct RunRecord: Sendable, Hashable, Codable {
    public let runID: String
    public let host: String
    public let pid: Int32
    public let startedAt: Date
    /// Nil while the run is going on, or if it died.
    public let finishedAt: Date?
    public let summary: RunSummary?
    /// Whether the API answered the session lookups in this run; nil when none was needed.
    public var apiLookups: Bool? = nil

    package init(
        runID: String, host: String, pid: Int32, startedAt: Date, finishedAt: Date?, summary: RunSummary?,
        apiLookups: Bool? = nil
    ) {
        self.runID = runID
        self.host = host
        self.pid = pid
        self.startedAt = startedAt
        self.finishedAt = finishedAt
        self.summary = summary
        self.apiLookups = apiLookups
    }
}

/// The numbers of a run's summary line.
public struct RunSummary: Sendable, Hashable, Codable {
    public var claimed: Int
    public var done: Int
    public var deferred: Int
    public var failed: Int
    /// Given back to `incoming/` uncounted (the run stopped: a signal, refused credentials, the
    /// breaker, a misdirected API, `--max-time`): they are due again at once. Not kept in `runs`.
    public var givenBack: Int = 0
    /// Left in `incoming/` because they were modified less than `min-age` ago. Not kept in `runs`.
    public var heldByMinAge: Int = 0
    public var requests: Int
    public var bytes: Int64
    public var seconds: Double
    public var exitCode: Int32

    public init(
        claimed: Int = 0, done: Int = 0, deferred: Int = 0, failed: Int = 0, requests: Int = 0, bytes: Int64 = 0,
        seconds: Double = 0, exitCode: Int32 = 0
    ) {
        self.claimed = claimed
        self.done = done
        self.deferred = deferred
        self.failed = failed
        self.requests = requests
        self.bytes = bytes
        self.seconds = seconds
        self.exitCode = exitCode
    }
}

extension BundleState {
    /// The `SELECT` of bundles' rows in either store, the tables in `schema` (`""` for SQLite,
    /// `"dopesync."` for PostgreSQL). `countingStepsDone`: with each one's steps done counted from
    /// its session's steps (by the primary key's prefix), what a resumed upload skips; else
    /// `steps_done` is NULL. Counted only for one bundle's read: a list of thousands would count each.
    package static func selectSQL(schema: String, countingStepsDone: Bool) -> String {
        let stepsDone =
            countingStepsDone
            ? "(SELECT count(*) FROM \(schema)steps s WHERE s.session_id = bundles.session_id AND s.state = 'done')"
            : "CAST(NULL AS bigint)"
        return """
            SELECT name, session_id, attempts, first_seen, first_seen_boot, next_attempt_at, last_error_reason, last_error_step,
                   last_error_http_status, last_error_message, last_error_field, last_outcome, updated_at, steps_total,
                   \(stepsDone) AS steps_done
            FROM \(schema)bundles
            """
    }
}

/// A bundle whose session is on the server with only some of its records: the API creates and
/// never deletes, so the server shows the session incomplete until a later attempt of the
/// bundle sends the rest, or for good if it failed (`status`, the metrics' half sessions).
public struct HalfSession: Sendable, Hashable {
    public let name: String
    public let sessionID: String
    /// Records of the session the server holds (steps done, the session itself included).
    public let recordsOnServer: Int
    /// Records still to send, when the bundle's plan size was recorded.
    public let recordsLeft: Int?
    /// When its first record was created on the server.
    public let since: Date

    /// The same `SELECT` for either store, its tables in `schema` (`""` for SQLite, `"dopesync."`
    /// for PostgreSQL): each bundle not done whose session has a step done, and fewer steps done
    /// than its plan holds (or a plan size never recorded), oldest first.
    package static func selectSQL(schema: String) -> String {
        """
        SELECT b.name AS name, b.session_id AS session_id, b.steps_total AS steps_total,
               CAST(count(*) AS integer) AS records, min(s.done_at) AS since
        FROM \(schema)bundles b
        JOIN \(schema)steps s ON s.session_id = b.session_id AND s.state = 'done'
        WHERE b.last_outcome IS NULL OR b.last_outcome <> 'done'
        GROUP BY b.name, b.session_id, b.steps_total
        HAVING b.steps_total IS NULL OR count(*) < b.steps_total
        ORDER BY since, b.name
        """
    }

    package init(name: String, sessionID: String, records: Int, stepsTotal: Int?, since: Double) {
        self.name = name
        self.sessionID = sessionID
        self.recordsOnServer = records
        self.recordsLeft = stepsTotal.map { max($0 - records, 0) }
        self.since = Date(timeIntervalSince1970: since)
    }
}
