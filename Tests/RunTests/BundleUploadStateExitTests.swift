import Testing

@testable import DopeSync

/// What stops the process, checked in a child process each (`#expect(processExitsWith:)`).
///
/// Exit tests live in suites named `…ExitTests`, which `make test` runs in a process of their own:
/// on Linux, swift-testing's exit-test monitor waits with `waitid(P_ALL, …, WNOWAIT)`, which
/// returns at once, again and again, while any child of the process is a zombie not yet reaped,
/// and the other suites start hundreds of children (Makefile, `test`).
@Suite struct BundleUploadStateExitTests {
    /// Each phase holds only what its own events need: an event its phase does not wait for is
    /// a driver's bug, and stops the process there rather than act on data that is not there.
    @Test(
        "an event its phase does not wait for stops the process: a send never made, a second start, a finished bundle")
    func anEventOutOfItsPhaseStops() async {
        await #expect(processExitsWith: .failure) {
            var state = BundleUploadStateTests.fresh()
            _ = state.answered(.created(id: 1, replayed: false), stopping: false)
        }
        await #expect(processExitsWith: .failure) {
            var state = BundleUploadStateTests.fresh()
            _ = state.start(stopping: false)
            _ = state.start(stopping: false)
        }
        await #expect(processExitsWith: .failure) {
            var state = BundleUploadStateTests.fresh()
            guard case .recordIntents = state.start(stopping: false) else { return }
            _ = state.tokenChecked(.bundles, stopping: false)
        }
        await #expect(processExitsWith: .failure) {
            var state = BundleUploadStateTests.fresh(
                completed: BundleUploadStateTests.done(BundleUploadStateTests.plan.steps))
            guard case .finish(.done) = state.start(stopping: false) else { return }
            _ = state.settled(committed: true, stopping: false)
        }
    }
}
