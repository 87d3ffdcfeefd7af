import CSystemCalls

/// What the kernel says of this machine's wall clock.
public enum SystemClock {
    /// Whether the kernel calls the clock synchronized (an NTP daemon keeps it: chrony,
    /// systemd-timesyncd, ntpd). A time recorded ahead of an unsynchronized clock may be right and
    /// the clock behind (a kiosk before NTP, at boot): nothing is rewritten on its word.
    public static var isSynchronized: Bool { dopesync_clock_is_synchronized() != 0 }
}
