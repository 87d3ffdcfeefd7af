import Testing

@Test func CLITestsBuild() {}
