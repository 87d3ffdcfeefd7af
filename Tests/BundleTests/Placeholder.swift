import Testing

@Test func BundleTestsBuild() {}
