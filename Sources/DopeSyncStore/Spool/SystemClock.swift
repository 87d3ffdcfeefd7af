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
        var time = timespec()
        guard clock_gettime(CLOCK_BOOTTIME, &time) == 0 else { return nil }
        return BootInstant(bootID: bootID, secondsSinceBoot: Double(time.tv_sec) + Double(time.tv_nsec) / 1e9)
    }

    /// Read once: a boot's id does not change while a process lives.
    private static let bootID: String? = {
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else {
            return nil
        }
        let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return id.isEmpty ? nil : id
    }()
}
