import DopeSyncSupport

/// What bounds one reading of an archive besides ``BundleLimits``' sizes: a deadline and a run's
/// stop. Checked before every block libarchive reads from the file and after every block it hands
/// back, so a hostile stream or a signal ends the reading within one block.
public struct ReadBudget: Sendable {
    /// How long the reading may take (for the message), and when it must end.
    public var time: Duration?
    var deadline: ContinuousClock.Instant?
    /// A run's stop (SIGINT/SIGTERM): the reading ends, and the bundle is given back, not failed.
    public var stop: StopRequest?

    public init(time: Duration?, stop: StopRequest? = nil) {
        self.time = time
        self.deadline = time.map { ContinuousClock.now + $0 }
        self.stop = stop
    }

    public static let unbounded = ReadBudget(time: nil)

    /// Why reading must end now, if it must.
    func exceeded(culprit: String) -> BundleError? {
        if let stop, stop.isRequested {
            return BundleError(.readingStopped, culprit: culprit, message: "reading stopped: the run is stopping")
        }
        if let deadline, let time, ContinuousClock.now >= deadline {
            return BundleError(
                .overTimeBudget, culprit: culprit,
                message:
                    "reading took longer than its time budget of \(time.formattedSeconds): refused as a hostile or damaged archive"
            )
        }
        return nil
    }
}

extension Duration {
    /// `12 s`, `1.5 s`.
    package var formattedSeconds: String {
        let tenths = (self / .milliseconds(100)).rounded()
        return tenths.truncatingRemainder(dividingBy: 10) == 0 ? "\(Int(tenths / 10)) s" : "\(tenths / 10) s"
    }
}
