import DopeSyncBundle
import DopeSyncStore
import DopeSyncSupport

/// The leases one worker holds, by bundle name, and when each runs out on the worker's own
/// `ContinuousClock`, which on Linux counts the time the machine was suspended (`CLOCK_BOOTTIME`):
/// a host that sleeps past a lease wakes without it. A value: events in (acquired, renewed, refused, released), answers out; the
/// store keeps it behind a lock and does the I/O.
///
/// A lease's local deadline is counted from the instant the worker *sent* the statement that
/// took or renewed it, never from the answer: the database's own deadline (its clock, when it ran
/// the statement, plus the lease) is then never earlier, so the worker stops acting on a bundle
/// before any other worker can take it over, whatever the network delayed.
package struct LeaseBook: Sendable {
    struct Lease: Sendable, Equatable {
        /// The claim's fence: each claim of the bundle increments it, and every write about the
        /// bundle must name it.
        let epoch: Int64
        /// No request, no write and no move for the bundle at or after this instant.
        var deadline: ContinuousClock.Instant
        /// Refused by the database (another worker's, or expired there): never held again.
        var lost = false
    }

    /// How long a lease lasts from the instant it was asked for.
    let duration: Duration
    private(set) var leases: [String: Lease] = [:]

    package init(duration: Duration) {
        self.duration = duration
    }

    /// The database granted the claim of `name` with `epoch`, asked for at `askedAt`.
    package mutating func acquired(_ name: String, epoch: Int64, askedAt: ContinuousClock.Instant) {
        leases[name] = Lease(epoch: epoch, deadline: askedAt + duration)
    }

    /// The database renewed the leases named, asked for at `askedAt`; those asked for and not
    /// renewed are lost.
    package mutating func renewed(_ renewed: Set<String>, of asked: [String: Int64], askedAt: ContinuousClock.Instant) {
        for (name, epoch) in asked {
            guard var lease = leases[name], lease.epoch == epoch, !lease.lost else { continue }
            if renewed.contains(name) {
                // Only ever later: a renewal whose answer came after a later one's changes nothing.
                lease.deadline = max(lease.deadline, askedAt + duration)
            } else {
                lease.lost = true
            }
            leases[name] = lease
        }
    }

    /// The database refused a write or a confirmation for `name` under `epoch`.
    package mutating func lost(_ name: String, epoch: Int64) {
        guard var lease = leases[name], lease.epoch == epoch else { return }
        lease.lost = true
        leases[name] = lease
    }

    /// The claim ended (an outcome recorded, or released).
    package mutating func released(_ name: String) {
        leases[name] = nil
    }

    /// The epoch to fence a write about `name` with, if the lease is still held at `now`.
    package func fence(_ name: String, at now: ContinuousClock.Instant) -> Int64? {
        guard let lease = leases[name], !lease.lost, now < lease.deadline else { return nil }
        return lease.epoch
    }

    /// The leases to renew at `now`: every one still held.
    package func renewable(at now: ContinuousClock.Instant) -> [String: Int64] {
        var due: [String: Int64] = [:]
        for (name, lease) in leases where !lease.lost && now < lease.deadline { due[name] = lease.epoch }
        return due
    }
}
