import CSystemCalls
import DopeSyncSupport
import Foundation

/// What the kernel says of this machine's wall clock.
public enum SystemClock {
    /// Whether the kernel calls the clock synchronized (an NTP daemon keeps it: chrony,
    /// systemd-timesyncd, ntpd). A time recorded ahead of an unsynchronized clock may be right and
    /// the clock behind (a kiosk before NTP, at boot): nothing is rewritten on its word.
    public static var isSynchronized: Bool { dopesync_clock_is_synchronized() != 0 }

    /// Now on this boot's own clock; nil where the kernel gives no boot id.
    public static var bootInstant: BootInstant? {
        guard let bootID else { return nil }
        #if os(Linux)
            var time = timespec()
            guard clock_gettime(CLOCK_BOOTTIME, &time) == 0 else { return nil }
            return BootInstant(bootID: bootID, secondsSinceBoot: Double(time.tv_sec) + Double(time.tv_nsec) / 1e9)
        #else
            return nil
        #endif
    }

    /// Now on the boot's clock if the wall clock is not synchronized: what a first sight records
    /// beside its wall time (``BootInstant``), so that a deferral under a clock NTP has set since
    /// can date it again.
    public static var firstSightStamp: BootInstant? { isSynchronized ? nil : bootInstant }

    /// Read once: a boot's id does not change while a process lives.
    private static let bootID: String? = {
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else {
            return nil
        }
        let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return id.isEmpty ? nil : id
    }()
}

/// What a store asks of the clock when it records a first sight and counts a deferral: the
/// system's, or a test's.
public struct ClockFacts: Sendable {
    public var isSynchronized: @Sendable () -> Bool
    public var bootInstant: @Sendable () -> BootInstant?

    public init(isSynchronized: @escaping @Sendable () -> Bool, bootInstant: @escaping @Sendable () -> BootInstant?) {
        self.isSynchronized = isSynchronized
        self.bootInstant = bootInstant
    }

    public static let system = ClockFacts(
        isSynchronized: { SystemClock.isSynchronized }, bootInstant: { SystemClock.bootInstant })

    /// As ``SystemClock/firstSightStamp``.
    public var firstSightStamp: BootInstant? { isSynchronized() ? nil : bootInstant() }
}
