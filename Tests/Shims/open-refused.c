/* Preloaded into a child by OpenRefused (Sources/DopeSyncTestSupport/PreloadedShim.swift): every
   open, open64, openat and openat64 of a path containing $OPEN_REFUSED_MATCH fails with errno
   $OPEN_REFUSED_ERRNO, as when the process has no descriptor left or the disk fails. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int refused(const char *path) {
    const char *match = getenv("OPEN_REFUSED_MATCH"), *code = getenv("OPEN_REFUSED_ERRNO");
    if (!match || !code || !path || !strstr(path, match)) return 0;
    errno = atoi(code);
    return 1;
}

#define MODE_ARGUMENT(flags) \
    mode_t mode = 0; \
    if ((flags) & (O_CREAT | O_TMPFILE)) { va_list list; va_start(list, flags); mode = va_arg(list, mode_t); va_end(list); }

#define REFUSING_OPEN(name) \
    int name(const char *path, int flags, ...) { \
        MODE_ARGUMENT(flags) \
        if (refused(path)) return -1; \
        static int (*real)(const char *, int, ...); \
        if (!real) real = dlsym(RTLD_NEXT, #name); \
        return real(path, flags, mode); \
    }

#define REFUSING_OPENAT(name) \
    int name(int directory, const char *path, int flags, ...) { \
        MODE_ARGUMENT(flags) \
        if (refused(path)) return -1; \
        static int (*real)(int, const char *, int, ...); \
        if (!real) real = dlsym(RTLD_NEXT, #name); \
        return real(directory, path, flags, mode); \
    }

REFUSING_OPEN(open)
REFUSING_OPEN(open64)
REFUSING_OPENAT(openat)
REFUSING_OPENAT(openat64)
