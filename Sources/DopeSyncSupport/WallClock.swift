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

    /// Whether `a` comes before `b` newest first, at `now`: times ahead of ``latestBelievable(at:)``
    /// after every other (a run started under a clock a year ahead is not the last run for a year).
    public static func newestFirst(_ a: Date, _ b: Date, at now: Date) -> Bool {
        let latest = latestBelievable(at: now)
        return (a <= latest) != (b <= latest) ? a <= latest : a > b
    }

    /// How far ahead of this clock a file's ctime may be and still be believed. A ctime comes
    /// from another machine's clock on a shared spool (the NFS server's, a CephFS client's), which
    /// nothing keeps within minutes of this one; a day ahead, only a clock that has gone back
    /// explains it. Taking such a file as written long ago must never take one still being written.
    public static let fileClockTolerance: TimeInterval = 86_400
}

/// A moment on one boot's own clock (`CLOCK_BOOTTIME`: seconds since that boot), which no
/// setting of the wall clock moves. Recorded beside a first sight made while the wall clock was
/// not synchronized: a kiosk without a battery-backed clock boots days behind, and its first NTP
/// sync sets the clock forward. Only then does it stand in for the wall clock: it stops while a
/// virtual machine is paused or a machine hibernates, when the wall clock, set right afterwards,
/// counts the time that passed, and an age too short could outlast the server's keys.
public struct BootInstant: Sendable, Hashable {
    /// The machine's host name and the kernel's id of the boot
    /// (`/proc/sys/kernel/random/boot_id`): virtual machines cloned from one memory snapshot
    /// share a boot id, not their clocks.
    public let bootID: String
    public let secondsSinceBoot: Double

    /// How far an instant may come before an earlier one of its boot and still be believed: a
    /// stamp written by a `requeue` racing the deferral that reads it. More is not one boot's
    /// clock (a machine restored from a snapshot).
    public static let readingTolerance: TimeInterval = 5

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

    /// Seconds from `earlier` to this instant, if both are of the same boot and in order (within
    /// ``readingTolerance``); nil otherwise.
    public func seconds(since earlier: BootInstant) -> TimeInterval? {
        guard bootID == earlier.bootID else { return nil }
        let seconds = secondsSinceBoot - earlier.secondsSinceBoot
        return seconds >= -Self.readingTolerance ? max(seconds, 0) : nil
    }
}
