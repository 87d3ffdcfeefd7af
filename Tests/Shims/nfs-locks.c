/* Preloaded into a child by NFSLocks (Sources/DopeSyncTestSupport/PreloadedShim.swift): flock as
   an NFS v4 client takes it, as a byte-range lock on the server, whose exclusive kind needs a
   descriptor open for writing. flock(LOCK_EX) on a descriptor open read-only, for a file whose
   path contains $NFS_LOCKS_MATCH, fails with EBADF, as Linux's nfs4_proc_lock answers it. With
   $NFS_LOCKS_REFUSE, every flock of such a file fails with that errno instead: a mount whose lock
   service is not running (ENOLCK). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

int flock(int descriptor, int operation) {
    static int (*real)(int, int);
    if (!real) real = dlsym(RTLD_NEXT, "flock");
    const char *match = getenv("NFS_LOCKS_MATCH"), *refuse = getenv("NFS_LOCKS_REFUSE");
    int flags = fcntl(descriptor, F_GETFL);
    int exclusiveReadOnly = (operation & LOCK_EX) && flags >= 0 && (flags & O_ACCMODE) == O_RDONLY;
    if (match && (refuse || exclusiveReadOnly)) {
        char link[64], path[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%d", descriptor);
        ssize_t length = readlink(link, path, sizeof path - 1);
        if (length > 0) {
            path[length] = 0;
            if (strstr(path, match)) {
                errno = refuse ? atoi(refuse) : EBADF;
                return -1;
            }
        }
    }
    return real(descriptor, operation);
}
