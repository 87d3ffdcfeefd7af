/* Preloaded into a child by StalledRename (Sources/DopeSyncTestSupport/StalledRename.swift):
   holds every rename, renameat and renameat2 whose source contains $STALL_MATCH while the
   file $STALL_GATE exists, as a hard NFS mount holds them while its server is gone. */
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
