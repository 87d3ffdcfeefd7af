#ifndef DOPESYNC_CARCHIVE_SHIM_H
#define DOPESYNC_CARCHIVE_SHIM_H
#include <archive.h>
#include <archive_entry.h>
#include <locale.h>

/// A locale whose character set is UTF-8, for libarchive's name conversions only (LC_CTYPE).
/// libarchive converts a zip entry's UTF-8 name, and a pax header's, into the calling thread's
/// character set; in the "C" locale that cron and systemd give (and that a process which never
/// calls setlocale keeps) the conversion fails and the name comes back NULL. Installed per thread
/// with uselocale() around the calls that read headers, never process-wide. NULL when the system
/// has no UTF-8 locale at all (glibc has built C.UTF-8 in since 2.35).
static inline locale_t dopesync_utf8_ctype_locale(void) {
    static const char *const names[] = {"C.UTF-8", "C.utf8", "en_US.UTF-8"};
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
        locale_t locale = newlocale(LC_CTYPE_MASK, names[i], (locale_t)0);
        if (locale != (locale_t)0) return locale;
    }
    return (locale_t)0;
}
#endif
