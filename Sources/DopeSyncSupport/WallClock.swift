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
