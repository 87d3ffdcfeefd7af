import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What a child started with `posix_spawn` inherits: its standard input, output and error, and
/// nothing else; its signals as a shell would start it.
///
/// Why: a descriptor open in this process without close-on-exec when the child starts stays
/// open in the child for as long as it lives. Foundation's `Pipe` makes such descriptors, so a
/// long-lived child (a database server started through `pg_ctl`, a watchdog) started while
/// another thread waits for a pipe's end keeps that pipe open and the reader waits for ever.
/// A flock's descriptor inherited would hold the lock as long as the child lives.
public enum SpawnInheritance {
    /// Starts `path` with `arguments` (argv[0] first) and `environment` (`NAME=value`): its
    /// descriptors 0 to 2 as `streams` sets them, nothing else inherited, its signals afresh. With
    /// `ownProcessGroup`, the child leads a process group of its own (its pid), which a signal can
    /// reach as a whole: the child and whatever it starts and leaves behind. The child's pid, or
    /// `posix_spawn`'s error number.
    public static func spawn(
        _ path: String, _ arguments: [String], environment: [String], ownProcessGroup: Bool = false,
        streams: (inout posix_spawn_file_actions_t) -> Void
    ) -> Result<pid_t, POSIXError> {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        streams(&actions)
        closeAllButStandard(&actions)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        startSignalsAfresh(&attributes)
        if ownProcessGroup {
            posix_spawnattr_setpgroup(&attributes, 0)
            var flags: Int16 = 0
            posix_spawnattr_getflags(&attributes, &flags)
            posix_spawnattr_setflags(&attributes, flags | Int16(POSIX_SPAWN_SETPGROUP))
        }
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
        guard result == 0 else { return .failure(POSIXError(POSIXErrorCode(rawValue: result) ?? .EINVAL)) }
        return .success(pid)
    }

    /// Adds to `actions` the closing of every descriptor from 3 up, in the child, after the
    /// actions added before it (so a `dup2` onto 0, 1 or 2 added first still happens).
    public static func closeAllButStandard(_ actions: inout posix_spawn_file_actions_t) {
        if let closeFrom = addCloseFrom {
            _ = closeFrom(&actions, 3)
            return
        }
        // A C library without posix_spawn_file_actions_addclosefrom_np (before glibc 2.34): each
        // descriptor open now. One opened between this and the spawn can still slip through.
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        for descriptor in open.compactMap(Int32.init) where descriptor > 2 {
            posix_spawn_file_actions_addclose(&actions, descriptor)
        }
    }

    /// Sets `attributes` so that the child starts with no signal blocked and every signal's
    /// default action, as a shell would start it.
    ///
    /// Why: `posix_spawn` hands the child the calling thread's signal mask and every ignored
    /// signal. A thread of the test runner blocks SIGTERM, SIGINT and most others: a child it
    /// started, and every child of that child, could not be asked to stop (a token command under
    /// `timeout(1)` then ran to its time limit, 30 s, instead of ending when told).
    public static func startSignalsAfresh(_ attributes: inout posix_spawnattr_t) {
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        // The classic signals; SIGKILL and SIGSTOP cannot be set, and glibc keeps the real-time
        // ones it uses itself.
        for signal in Int32(1)...31 where signal != SIGKILL && signal != SIGSTOP {
            sigaddset(&defaults, signal)
        }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    }

    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

    /// glibc 2.34's `posix_spawn_file_actions_addclosefrom_np`, looked up at run time: Swift's
    /// Glibc module does not declare it (it is a GNU extension).
    private static let addCloseFrom: AddCloseFrom? = {
        // RTLD_DEFAULT is a null handle in glibc: the symbol anywhere in the process.
        guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: AddCloseFrom.self)
    }()
}
