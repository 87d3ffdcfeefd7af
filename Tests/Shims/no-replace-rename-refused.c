// Preloaded into a child (LD_PRELOAD) by the tests' `NoReplaceRenameRefused`: renameat2 with
// RENAME_NOREPLACE answers EINVAL, as on NFS and some overlay mounts, so every no-replace move
// the worker makes takes its link-then-unlink way. Other renameat2 calls go through.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>

int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    if (flags & RENAME_NOREPLACE) {
        errno = EINVAL;
        return -1;
    }
    int (*real)(int, const char *, int, const char *, unsigned int) =
        (int (*)(int, const char *, int, const char *, unsigned int))dlsym(RTLD_NEXT, "renameat2");
    return real(olddirfd, oldpath, newdirfd, newpath, flags);
}
