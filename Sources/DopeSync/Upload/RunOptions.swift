import Foundation

/// What `dopesync run` was asked to do.
public struct RunOptions: Sendable {
    public var spoolRoot: String
    public var apiURL: String
    public var token: String
    public var concurrency = 4
    public var maxBundles: Int?
    public var maxTime: Duration?
    /// The clock `maxTime` is measured on, read before each claim: the monotonic clock. A test
    /// moves it on (from the same reading at the start) at the moment it chooses, instead of
    /// waiting for the time to pass.
    public var clock: @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }
    public var minAge: Duration = .seconds(5)
    public var limits = BundleLimits.default
    public var retry = RetryPolicy()
    /// When a deferred bundle is due again, and after how many attempts or how long it fails.
    public var deferral = DeferralPolicy()
    /// When the run stops claiming because the API is down or most requests fail (exit 75).
    public var breaker = CircuitBreaker.Policy()
    /// Set by SIGINT/SIGTERM: stop claiming, let the steps in flight finish within the stop's
    /// grace (then they are cancelled), give the rest back.
    public var stop = StopRequest()
    /// A live progress line on standard error (for a terminal; cron gets plain log lines).
    public var showProgress = false
    /// Where to write a Prometheus textfile after the run (``RunMetrics``), if anywhere.
    public var metricsFile: String?
    /// A `dopesync` executable that reads a bundle in a process of its own (`inspect`), for bundles
    /// whose last reading never ended; nil reads them in-process (see ``IsolatedReading``).
    public var isolatedReader: String?
    /// Look on the server before sending a step whose request may already have reached it (and
    /// once per new bundle, before its session): exactly once even against an API that ignores
    /// `Idempotency-Key`. Off: keys alone (for measuring what the looks cost).
    public var lookBeforeResending = true
    /// Check the ids a bundle names against the server's reference lists before its first
    /// request (``ReferenceCatalog``). Off: the creates' 422s find them (for measuring the cost).
    public var checkReferencesFirst = true
    /// Extra trusted roots, a proxy and a cap on the upload rate.
    public var network = APIClient.Network()
    /// The free space the spool's file system must keep: below it the run claims nothing more.
    /// None by default in the library (`dopesync run`'s default is ``FreeSpaceFloor/default``).
    public var minFreeSpace = FreeSpaceFloor.bytes(0)
    /// How long `prune` keeps bundles in done/: what a run below the floor says prune would free.
    public var pruneAfter: Duration = .seconds(30 * 86_400)
    /// With nothing to upload, check that the API is there and takes the token (one `GET
    /// /api/health` and one lookup); off only for measuring the upload path alone.
    public var probeWhenIdle = true
    /// Create the spool when its folder does not exist (`--create-spool`); else a missing spool is
    /// an error (exit 73): a mistyped path must not become an empty spool and a run that did nothing.
    public var createSpool = false
    /// Run as root on a spool that belongs to another user (`--allow-root`); else refused, since
    /// what root creates there the service's own user could not use.
    public var allowRoot = false
    /// How long a checkpoint write waits for another process's write (then the run stops, exit 73).
    public var checkpointBusyTimeout: Duration = .seconds(10)

    /// The shared store of several hosts; nil: the SQLite file in the spool.
    public var database: DatabaseSettings?

    /// Where a fresh token comes from when the API refuses it (the token itself is ``token``).
    public var tokenSource = Credential.Source.fixed

    public init(spoolRoot: String, apiURL: String, token: String) {
        self.spoolRoot = spoolRoot
        self.apiURL = apiURL
        self.token = token
    }
}
