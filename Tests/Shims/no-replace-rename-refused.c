// Preloaded into a child (LD_PRELOAD) by the tests' `NoReplaceRenameRefused`: renameat2 with
// RENAME_NOREPLACE answers EINVAL, as on NFS and some overlay mounts, so every no-replace move
// the worker makes takes its link-then-unlink way. Other renameat2 calls go through.
//
// With NFS_UNLINK_REPORTS set to an errno, an unlink of a path holding a byte that is not ASCII
// (a name that is not UTF-8, say) is carried out and then reports that errno, as an NFS client
// does whose request was sent again after the first answer was lost.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    if (flags & RENAME_NOREPLACE) {
        errno = EINVAL;
        return -1;
    }
    int (*real)(int, const char *, int, const char *, unsigned int) =
        (int (*)(int, const char *, int, const char *, unsigned int))dlsym(RTLD_NEXT, "renameat2");
    return real(olddirfd, oldpath, newdirfd, newpath, flags);
}

int unlink(const char *path) {
    int (*real)(const char *) = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    int result = real(path);
    const char *reports = getenv("NFS_UNLINK_REPORTS");
    if (result != 0 || !reports) return result;
    for (const unsigned char *byte = (const unsigned char *)path; *byte; byte++) {
        if (*byte >= 0x80) {
            errno = atoi(reports);
            return -1;
        }
    }
    return result;
}
