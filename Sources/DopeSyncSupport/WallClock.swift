import Foundation

/// What the worker assumes of this machine's wall clock, which may be set back at any time (a
/// kiosk that booted with a wrong date, then NTP).
public enum WallClock {
    /// How far ahead of this clock a time the store recorded may be and still be believed: hosts
    /// of one shared database a little apart, and a clock slewed by NTP, stay well within it.
    /// Further ahead, the clock went back since the time was recorded, and a wait or an age
    /// counted from it would last as long as the clock was ahead.
    public static let stepTolerance: TimeInterval = 300

    /// The latest recorded time still believed at `now`.
    public static func latestBelievable(at now: Date) -> Date { now.addingTimeInterval(stepTolerance) }

    /// How far ahead of this clock a file's ctime may be and still be believed. A ctime comes
    /// from another machine's clock on a shared spool (the NFS server's, a CephFS client's), which
    /// nothing keeps within minutes of this one; a day ahead, only a clock that has gone back
    /// explains it. Taking such a file as written long ago must never take one still being written.
    public static let fileClockTolerance: TimeInterval = 86_400
}

/// A moment on one boot's own clock (`CLOCK_BOOTTIME`: seconds since that boot, suspend
/// included), which no setting of the wall clock moves. Stored beside a wall time so that the
/// time between two moments of one boot is known even when the wall clock was set in between: a
/// kiosk without a battery-backed clock boots days behind and is set forward by its first NTP sync.
public struct BootInstant: Sendable, Hashable {
    /// The kernel's id of the boot (`/proc/sys/kernel/random/boot_id`).
    public let bootID: String
    public let secondsSinceBoot: Double

    public init(bootID: String, secondsSinceBoot: Double) {
        self.bootID = bootID
        self.secondsSinceBoot = secondsSinceBoot
    }

    /// As a store keeps it: `BOOTID@SECONDS`.
    public var stored: String { "\(bootID)@\(secondsSinceBoot)" }

    /// A stored instant; nil for nil or anything that is not one.
    public init?(stored: String?) {
        guard let stored, let at = stored.lastIndex(of: "@"), let seconds = Double(stored[stored.index(after: at)...]),
            seconds.isFinite, at > stored.startIndex
        else { return nil }
        self.init(bootID: String(stored[..<at]), secondsSinceBoot: seconds)
    }

    /// Seconds from `earlier` to this instant, if both are of the same boot.
    public func seconds(since earlier: BootInstant) -> TimeInterval? {
        bootID == earlier.bootID ? secondsSinceBoot - earlier.secondsSinceBoot : nil
    }

    /// How long ago `then` was: by the boot's clock when `then` and `now` are moments of the same
    /// boot (the wall clock may have been set in between), else by the wall clock.
    public static func elapsed(from then: (wall: Date, boot: BootInstant?), to now: (wall: Date, boot: BootInstant?))
        -> TimeInterval
    {
        if let nowBoot = now.boot, let thenBoot = then.boot, let seconds = nowBoot.seconds(since: thenBoot) {
            return max(seconds, 0)
        }
        return now.wall.timeIntervalSince(then.wall)
    }
}
