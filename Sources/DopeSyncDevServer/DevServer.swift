/// The TrueDope API on loopback, for demos, tests and benchmarks (placeholder until issue 3 lands).
public enum DevServerInfo {
    public static let name = "dopesync-devserver"
}
