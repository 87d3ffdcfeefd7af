import CSystemCalls
import Subprocess
import SystemPackage

#if canImport(Glibc)
    import Glibc
#endif

/// How every child process starts, the worker's (the token command, the isolated reader) and the
/// tests' alike: through swift-subprocess, which waits for it without a thread or a polling loop
/// (a pidfd in its epoll), and which gives it descriptors 0, 1 and 2 and nothing else, its signals
/// at their default action and none blocked.
///
/// Why those: a descriptor open in this process when a child starts would stay open in the child
/// for as long as it lives. A pipe's end so kept (by a database server started through `pg_ctl`,
/// a watchdog) makes its reader wait for ever; a claim's flock would be held while the child runs.
/// A signal blocked or ignored here (a test runner's thread blocks SIGTERM and SIGINT) would be in
/// the child too, and in every child of it: a token command under a time limit then could not be
/// asked to stop. swift-subprocess 1.0.2 does all of it on Linux. With glibc 2.34 or later it spawns
/// with the close-from file action (`closefrom(3)`, after the dup2s onto 0 to 2) and with the spawn
/// attributes that set the signal mask empty and every signal but SIGKILL and SIGSTOP to its
/// default. Where the C library has no close-from action, it forks instead and, in the child, sets
/// each signal to SIG_DFL, empties the mask and marks every descriptor from 3 up close-on-exec
/// (`close_range`, or each one listed in /dev/fd) before exec.
public enum ChildProcess {
    /// `executable` (a path: no lookup in PATH) with `arguments` after argv[0] and exactly
    /// `environment`, in `directory` if one is given. With `ownProcessGroup`, the child leads a
    /// process group of its own, which a signal reaches as a whole: the child and whatever it
    /// starts and leaves behind. When the task running it is cancelled, it is asked to end
    /// (SIGTERM, to its group if it has one) and killed (SIGKILL) `grace` later if it has not.
    public static func configuration(
        _ executable: String, _ arguments: [String], environment: [String: String], in directory: String? = nil,
        ownProcessGroup: Bool = false, grace: Duration
    ) -> Configuration {
        var options = PlatformOptions()
        // 0: a group whose id is the child's pid (setpgid(0, 0) in the child).
        if ownProcessGroup { options.processGroupID = 0 }
        options.teardownSequence = [
            .gracefulShutDown(toProcessGroup: ownProcessGroup, allowedDurationToNextStep: grace)
        ]
        return Configuration(
            executable: .path(FilePath(executable)), arguments: Arguments(arguments),
            environment: .custom(
                Dictionary(uniqueKeysWithValues: environment.map { (Environment.Key(stringLiteral: $0.key), $0.value) })
            ),
            workingDirectory: directory.map { FilePath($0) }, platformOptions: options)
    }

    /// How a child ended as a shell says it: its exit status, or 128 + the signal that ended it.
    public static func shellStatus(_ status: TerminationStatus) -> Int32 {
        switch status {
        case .exited(let code): code
        case .signaled(let signal): 128 + signal
        }
    }

    /// A pipe, both ends close-on-exec from the start: the read end and the write end. Handed to a
    /// child as its standard output (or input), the end is duplicated onto 1 (or 0), which clears
    /// the flag there and only there.
    public static func pipe() throws(Errno) -> (read: Int32, write: Int32) {
        var ends: [Int32] = [-1, -1]
        guard dopesync_pipe_close_on_exec(&ends) == 0 else { throw Errno(rawValue: errno) }
        return (ends[0], ends[1])
    }
}
