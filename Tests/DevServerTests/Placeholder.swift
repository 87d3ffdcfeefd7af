import Testing

@Test func DevServerTestsBuild() {}
