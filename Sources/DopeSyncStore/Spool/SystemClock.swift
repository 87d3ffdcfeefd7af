import CSystemCalls
import DopeSyncSupport
import Foundation

/// What the kernel says of this machine's wall clock.
public enum SystemClock {
    /// Whether the kernel calls the clock synchronized (an NTP daemon keeps it: chrony,
    /// systemd-timesyncd, ntpd). A time recorded ahead of an unsynchronized clock may be right and
    /// the clock behind (a kiosk before NTP, at boot): nothing is rewritten on its word.
    public static var isSynchronized: Bool { synchronization == .synchronized }

    /// Whether the kernel calls the clock synchronized, or why it could not be asked.
    public enum Synchronization: Sendable, Equatable {
        case synchronized, notSynchronized
        /// `adjtimex` refused (a sandbox: systemd's `ProtectClock=`, or `@clock` left out of a
        /// `SystemCallFilter=`): the clock counts as not synchronized.
        case unknown(errno: Int32)
    }

    public static var synchronization: Synchronization {
        switch dopesync_clock_synchronization() {
        case 1: .synchronized
        case 0: .notSynchronized
        case let failure: .unknown(errno: -failure)
        }
    }

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

    /// Read once: a boot's id does not change while a process lives.
    private static let bootID: String? = {
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else {
            return nil
        }
        let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !id.isEmpty else { return nil }
        var name = [CChar](repeating: 0, count: 256)
        let host = gethostname(&name, name.count - 1) == 0 ? String(cCharacters: name) : ""
        return "\(host)/\(id)"
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

    /// Now on the boot's clock if the wall clock is not synchronized: what a first sight records
    /// beside its wall time (``BootInstant``), so that a deferral under a clock NTP has set since
    /// can date it again.
    public var firstSightStamp: BootInstant? { isSynchronized() ? nil : bootInstant() }
}
