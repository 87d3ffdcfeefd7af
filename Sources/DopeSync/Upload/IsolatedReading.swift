import Foundation
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// Reads a bundle once more in a child process (`dopesync inspect`), for a bundle whose last
/// reading never ended: the process that read it died, by a crash in the archive library, the
/// OOM killer, or a kill after a hang, or by a reboot or a kill that had nothing to do with it.
/// The child tells which. If reading kills or stalls it, the run is unharmed and the bundle goes
/// to `failed/` at once; if it survives, the bundle was innocent and is read as usual.
struct IsolatedReading: Sendable {
    /// A `dopesync` executable (`/proc/self/exe` for the running one).
    let executable: String

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

    /// Runs `dopesync inspect BUNDLE` and waits for it at most `time`, polling every 20 ms: this
    /// is a rare path, and polling needs no thread of its own.
    func read(_ bundle: String, time: Duration, stop: StopRequest, logger: Logger) async -> Outcome {
        // Nothing else of the worker's: a claim's flock inherited would be held while it reads.
        let spawned = SpawnInheritance.spawn(executable, [executable, "inspect", bundle], environment: []) {
            for descriptor: Int32 in [0, 1, 2] {
                posix_spawn_file_actions_addopen(&$0, descriptor, "/dev/null", descriptor == 0 ? O_RDONLY : O_WRONLY, 0)
            }
        }
        let child: ChildProcess
        switch spawned {
        case .success(let pid): child = ChildProcess(pid: pid)
        case .failure(let error): return .notStarted(errno: error.code.rawValue)
        }
        logger.debug("reading the bundle in a separate process", metadata: ["reader.pid": "\(child.pid)"])

        let deadline = ContinuousClock.now + time
        while true {
            switch child.state() {
            case .ended(.exited(let status)): return .survived(exitStatus: status)
            case .ended(.killed(let signal)): return .killed(signal: signal)
            case .gone(let error): return .notStarted(errno: error)
            case .running: break
            }
            let ending: Outcome? = stop.isRequested ? .stopped : ContinuousClock.now >= deadline ? .timedOut : nil
            if let ending {
                child.killAndReap()
                return ending
            }
            // Cancellation is not how a run stops (the StopRequest is): keep waiting for the child.
            try? await Task.sleep(for: .milliseconds(20))
        }
    }
}
