/// dopesync: claims session bundles from a spool and uploads them, in order and exactly once,
/// to the TrueDope API. See ARCHITECTURE.md for the parts and how one bundle flows through them.
public enum DopeSyncInfo {
    public static let version = "0.1.0"
}
