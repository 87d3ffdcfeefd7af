/* Preloaded into a child by ClockAhead (Sources/DopeSyncTestSupport/PreloadedShim.swift): the
   wall clock (clock_gettime's CLOCK_REALTIME and its coarse form, gettimeofday, time) reads
   $CLOCK_AHEAD_SECONDS later than it is, as on a machine that booted with its clock wrong. The
   monotonic clocks are left alone. With $CLOCK_SYNCHRONIZED 1 (or 0, or "denied"), adjtimex and ntp_adjtime
   also report the clock synchronized, as NTP keeps it (or not), whatever this machine's is. (Debian's libfaketime moves clocks too, but
   under it a Swift program sees no command-line arguments.) */
#define _GNU_SOURCE
#include <errno.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/timex.h>
#include <time.h>

static long ahead(void) {
    const char *seconds = getenv("CLOCK_AHEAD_SECONDS");
    return seconds ? atol(seconds) : 0;
}

int clock_gettime(clockid_t clock, struct timespec *time) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = dlsym(RTLD_NEXT, "clock_gettime");
    int result = real(clock, time);
    if (result == 0 && time && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) time->tv_sec += ahead();
    return result;
}

int gettimeofday(struct timeval *restrict time, void *restrict zone) {
    static int (*real)(struct timeval *restrict, void *restrict);
    if (!real) real = dlsym(RTLD_NEXT, "gettimeofday");
    int result = real(time, zone);
    if (result == 0 && time) time->tv_sec += ahead();
    return result;
}

time_t time(time_t *out) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (out) *out = now.tv_sec;
    return now.tv_sec;
}

static int synchronized(struct timex *state, int clock) {
    const char *synchronized = getenv("CLOCK_SYNCHRONIZED");
    if (!synchronized) return clock;
    /* "denied": as under a sandbox that refuses the call (systemd's ProtectClock=). */
    if (synchronized[0] == 'd') {
        errno = EPERM;
        return -1;
    }
    /* Told what to say: also where the real call is refused (a seccomp filter). */
    if (clock == -1) *state = (struct timex){0};
    if (synchronized[0] == '0') {
        state->status |= STA_UNSYNC;
        return TIME_ERROR;
    }
    state->status &= ~STA_UNSYNC;
    return TIME_OK;
}

int adjtimex(struct timex *state) {
    static int (*real)(struct timex *);
    if (!real) real = dlsym(RTLD_NEXT, "adjtimex");
    return synchronized(state, real(state));
}

int ntp_adjtime(struct timex *state) {
    static int (*real)(struct timex *);
    if (!real) real = dlsym(RTLD_NEXT, "ntp_adjtime");
    return synchronized(state, real(state));
}
