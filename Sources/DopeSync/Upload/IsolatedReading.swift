import Logging
import Subprocess
import SystemPackage

/// Reads a bundle once more in a child process (`dopesync inspect`), for a bundle whose last
/// reading never ended: the process that read it died, by a crash in the archive library, the
/// OOM killer, or a kill after a hang, or by a reboot or a kill that had nothing to do with it.
/// The child tells which. If reading kills or stalls it, the run is unharmed and the bundle goes
/// to `failed/` at once; if it survives, the bundle was innocent and is read as usual.
struct IsolatedReading: Sendable {
    /// A `dopesync` executable (`/proc/self/exe` for the running one).
    let executable: String

    /// How long a reader past its time (or stopped) has between SIGTERM and SIGKILL.
    static let grace = Duration.seconds(1)

    enum Outcome: Equatable, Sendable {
        /// The child ended by itself (0: valid, 65: invalid): reading is safe.
        case survived(exitStatus: Int32)
        /// The child was killed by this signal while reading.
        case killed(signal: Int32)
        /// The child was still reading when the time budget ran out (it was killed).
        case timedOut
        /// The run is stopping (the child was killed).
        case stopped
        /// The child could not be started (errno).
        case notStarted(errno: Int32)
    }

    /// Runs `dopesync inspect BUNDLE` and waits for it at most `time`, or until the run is asked to
    /// stop: whichever comes first of its end, the time and the stop cancels the others, and a
    /// cancelled child is ended by ``ChildProcess``'s teardown (SIGTERM, SIGKILL ``grace`` later).
    func read(_ bundle: String, time: Duration, stop: StopRequest, logger: Logger) async -> Outcome {
        // No environment, and standard input and output on /dev/null: nothing of the worker's (a
        // claim's flock inherited would be held while it reads; its variables hold secrets).
        let configuration = ChildProcess.configuration(
            executable, ["inspect", bundle], environment: [:], grace: Self.grace)
        let outcome = await withTaskGroup(of: Outcome?.self) { group in
            group.addTask {
                do {
                    let result = try await Subprocess.run(
                        configuration, input: .none, output: .discarded, error: .discarded
                    ) { execution in
                        logger.debug(
                            "reading the bundle in a separate process",
                            metadata: ["reader.pid": "\(execution.processIdentifier.value)"])
                    }
                    switch result.terminationStatus {
                    case .exited(let status): return .survived(exitStatus: status)
                    case .signaled(let signal): return .killed(signal: signal)
                    }
                } catch {
                    return .notStarted(errno: (error as? SubprocessError)?.underlyingError?.rawValue ?? 0)
                }
            }
            group.addTask {
                switch await stop.sleep(for: time, endsAtRequest: true) {
                case .timeUp: .timedOut
                case .stopRequested, .graceOver: .stopped
                // The reading ended first (or the run's task was cancelled: see below). Never
                // `.ended`: this wait is sleep(for:)'s own, which nobody else can end.
                case .cancelled, .ended: nil
                }
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        // Cancelled from outside, the child was ended as at a stop: what its end says is not the
        // bundle's doing, so the bundle is given back, not failed.
        if Task.isCancelled { return .stopped }
        return outcome ?? .stopped
    }
}
