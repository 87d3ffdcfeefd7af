#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <sys/timex.h>
#endif

#include "CSystemCalls.h"

int dopesync_pipe_close_on_exec(int descriptors[2]) {
#ifdef __linux__
    return pipe2(descriptors, O_CLOEXEC);
#else
    // No pipe2: the window between pipe and fcntl stays open (dopesync runs on Linux).
    if (pipe(descriptors) != 0) return -1;
    fcntl(descriptors[0], F_SETFD, FD_CLOEXEC);
    fcntl(descriptors[1], F_SETFD, FD_CLOEXEC);
    return 0;
#endif
}

int dopesync_rename_no_replace(const char *source, const char *target) {
#ifdef __linux__
    return renameat2(AT_FDCWD, source, AT_FDCWD, target, RENAME_NOREPLACE);
#else
    // No renameat2: the caller's link + unlink does the same job.
    (void)source;
    (void)target;
    errno = ENOSYS;
    return -1;
#endif
}

int dopesync_open_path_only(const char *path) {
#ifdef __linux__
    return open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
#else
    (void)path;
    errno = ENOSYS;
    return -1;
#endif
}

int dopesync_pidfd_open(int pid) {
#if defined(__linux__) && defined(SYS_pidfd_open)
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

int dopesync_clock_synchronization(void) {
#ifdef __linux__
    struct timex state = {0};  /* modes 0: only reads */
    int clock = adjtimex(&state);
    if (clock == -1) return -errno;
    return clock != TIME_ERROR && !(state.status & STA_UNSYNC);
#else
    return -ENOSYS;
#endif
}

int dopesync_ofd_lock_byte(int descriptor, long long offset, int lock) {
#ifdef F_OFD_SETLK
    struct flock range = {0};
    range.l_type = lock ? F_WRLCK : F_UNLCK;
    range.l_whence = SEEK_SET;
    range.l_start = lock ? (off_t)offset : 0;
    range.l_len = lock ? 1 : 0;
    while (fcntl(descriptor, F_OFD_SETLK, &range) != 0) {
        if (errno != EINTR) return errno;
    }
    return 0;
#else
    (void)descriptor;
    (void)offset;
    (void)lock;
    return EINVAL;
#endif
}
