import DopeSync

/// Helpers shared by the test targets.
public enum TestSupport {}
