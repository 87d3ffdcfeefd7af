#if canImport(Glibc)
    import Glibc
#endif

/// A child the worker started (``SpawnInheritance/spawn(_:_:environment:streams:)``), by its pid:
/// whether it has ended, asked without waiting, and an end made sure of. The worker's children are
/// waited for by asking again now and then: rare paths, for which a thread or a descriptor of
/// their own would cost more than the asking.
struct ChildProcess {
    let pid: pid_t

    /// How a child ended, read from its wait status.
    enum Ending: Equatable {
        case exited(status: Int32)
        case killed(signal: Int32)
    }

    enum State: Equatable {
        case running
        case ended(Ending)
        /// Not a child of this process (any more): reaped elsewhere, or never started.
        case gone(errno: Int32)
    }

    /// Whether it has ended, without waiting; an ended child is reaped here.
    func state() -> State {
        var status: Int32 = 0
        while true {
            let reaped = waitpid(pid, &status, WNOHANG)
            if reaped == 0 { return .running }
            if reaped == pid {
                let signal = status & 0x7f
                return .ended(signal == 0 ? .exited(status: (status >> 8) & 0xff) : .killed(signal: signal))
            }
            if errno != EINTR { return .gone(errno: errno) }
        }
    }

    /// Kills it (SIGKILL) and reaps it, which then takes no time.
    func killAndReap() {
        kill(pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }
}
