import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A spool whose file system stalls a rename, as a `hard` NFS mount does while its server is
/// gone: a small library preloaded into a child (`LD_PRELOAD`) holds every `rename`, `renameat`
/// and `renameat2` whose source path contains ``match`` until ``gate`` is removed, and says once,
/// on a FIFO, that it holds one. The stall is in the C library's calls the worker makes, so
/// whichever thread makes them waits, as it would on a real mount.
public final class StalledRename: Sendable {
    /// The variables that load the library into a child and aim it.
    public let environment: [String: String]
    /// While this file exists, a matching rename waits.
    public let gate: String
    private let notice: String

    /// Builds the library with the system's C compiler into `directory`; `match` is a piece of
    /// the path of the renames to hold (a bundle's name).
    public init(in directory: URL, holdingRenamesOf match: String) async throws {
        let source = directory.appendingPathComponent("stall.c")
        let library = directory.appendingPathComponent("libstall.so").path
        try Self.source.write(to: source, atomically: true, encoding: .utf8)
        _ = try await runProcess("/usr/bin/cc", ["-shared", "-fPIC", "-O1", "-o", library, source.path, "-ldl"])
        gate = directory.appendingPathComponent("stall.gate").path
        notice = directory.appendingPathComponent("stall.notice").path
        guard FileManager.default.createFile(atPath: gate, contents: nil) else { throw POSIXError(.EIO) }
        guard mkfifo(notice, 0o600) == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        environment = ["LD_PRELOAD": library, "STALL_MATCH": match, "STALL_GATE": gate, "STALL_NOTICE": notice]
    }

    /// Returns once a child holds a rename (it opened the FIFO and said so).
    public func held() async -> Bool {
        await onOwnThread { [notice] in
            guard let handle = FileHandle(forReadingAtPath: notice) else { return false }
            defer { try? handle.close() }
            return handle.readLine() == "held"
        }
    }

    /// Lets every held rename go, and every later one through.
    public func release() {
        unlink(gate)
    }

    static let source = #"""
        #define _GNU_SOURCE
        #include <dlfcn.h>
        #include <fcntl.h>
        #include <stdlib.h>
        #include <string.h>
        #include <time.h>
        #include <unistd.h>

        static int told;

        static void hold(const char *path) {
            const char *match = getenv("STALL_MATCH"), *gate = getenv("STALL_GATE");
            if (!match || !gate || !path || !strstr(path, match) || access(gate, F_OK) != 0) return;
            if (!__atomic_exchange_n(&told, 1, __ATOMIC_SEQ_CST)) {
                const char *notice = getenv("STALL_NOTICE");
                int fd = notice ? open(notice, O_WRONLY | O_CLOEXEC) : -1;
                if (fd >= 0) { (void)!write(fd, "held\n", 5); close(fd); }
            }
            /* The fault's own wait: a stalled server answers nothing until it is back. */
            while (access(gate, F_OK) == 0) { struct timespec t = {0, 5000000}; nanosleep(&t, 0); }
        }

        int rename(const char *from, const char *to) {
            static int (*real)(const char *, const char *);
            if (!real) real = dlsym(RTLD_NEXT, "rename");
            hold(from);
            return real(from, to);
        }

        int renameat(int fromdir, const char *from, int todir, const char *to) {
            static int (*real)(int, const char *, int, const char *);
            if (!real) real = dlsym(RTLD_NEXT, "renameat");
            hold(from);
            return real(fromdir, from, todir, to);
        }

        int renameat2(int fromdir, const char *from, int todir, const char *to, unsigned int flags) {
            static int (*real)(int, const char *, int, const char *, unsigned int);
            if (!real) real = dlsym(RTLD_NEXT, "renameat2");
            hold(from);
            return real(fromdir, from, todir, to, flags);
        }
        """#
}
