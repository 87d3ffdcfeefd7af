import Testing

@Test func SessionValidationTestsBuild() {}
