/* A FUSE file system that passes every call through to a backing folder, and holds a rename
   whose source path contains $STALL_MATCH while the file $STALL_GATE exists: a `hard` NFS mount
   whose server went away. Mounted by StallingFileSystem
   (Sources/DopeSyncTestSupport/StallingFileSystem.swift).

   The stall is in the kernel, not in the caller's C library: while the rename waits for this
   process, the kernel holds what a rename holds (both folders' locks, and the file system's
   rename lock), so every other rename between folders, and every listing or new name in either
   folder, waits behind it, whichever thread or process asks.

   usage: stalling-passthrough BACKING MOUNTPOINT [FUSE options]
   Says "ready" on standard output once the kernel has the mount, and "held" the first time it
   holds a rename. */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int backing = -1;
static int told;

/* A path of the mount as one relative to the backing folder. */
static const char *rel(const char *path) {
    while (*path == '/') path++;
    return *path ? path : ".";
}

static int result(int value) { return value < 0 ? -errno : 0; }

static void hold(const char *path) {
    const char *match = getenv("STALL_MATCH"), *gate = getenv("STALL_GATE");
    if (!match || !gate || !strstr(path, match) || access(gate, F_OK) != 0) return;
    if (!__atomic_exchange_n(&told, 1, __ATOMIC_SEQ_CST)) {
        printf("held\n");
        fflush(stdout);
    }
    /* The fault's own wait: a stalled server answers nothing until it is back. At most
       STALL_LIMIT seconds (120 if unset): a test that never lets go fails, it does not hold
       the suite, nor the processes that wait on this mount, for good. */
    const char *limit = getenv("STALL_LIMIT");
    long ticks = (limit ? atol(limit) : 120) * 200;
    while (access(gate, F_OK) == 0 && ticks-- > 0) { struct timespec t = {0, 5000000}; nanosleep(&t, 0); }
    if (ticks < 0) {
        fprintf(stderr, "stalling-passthrough: let the rename of %s go after STALL_LIMIT\n", path);
    }
}

static void *fs_init(struct fuse_conn_info *conn, struct fuse_config *config) {
    (void)conn;
    /* Inode numbers as the backing folder has them (the worker compares a file's identity
       before and after a claim), and nothing cached: every call reaches this process. */
    config->use_ino = 1;
    config->entry_timeout = 0;
    config->attr_timeout = 0;
    config->negative_timeout = 0;
    printf("ready\n");
    fflush(stdout);
    return NULL;
}

static int fs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    if (fi) return result(fstat((int)fi->fh, st));
    return result(fstatat(backing, rel(path), st, AT_SYMLINK_NOFOLLOW));
}

static int fs_access(const char *path, int mask) { return result(faccessat(backing, rel(path), mask, 0)); }

static int fs_readlink(const char *path, char *buffer, size_t size) {
    ssize_t length = readlinkat(backing, rel(path), buffer, size - 1);
    if (length < 0) return -errno;
    buffer[length] = 0;
    return 0;
}

static int fs_opendir(const char *path, struct fuse_file_info *fi) {
    int fd = openat(backing, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    DIR *directory = fdopendir(fd);
    if (!directory) { int failure = errno; close(fd); return -failure; }
    fi->fh = (uintptr_t)directory;
    return 0;
}

static int fs_readdir(const char *path, void *buffer, fuse_fill_dir_t fill, off_t offset,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
    (void)path;
    (void)flags;
    DIR *directory = (DIR *)(uintptr_t)fi->fh;
    if (offset == 0) rewinddir(directory); else seekdir(directory, offset);
    for (;;) {
        errno = 0;
        struct dirent *entry = readdir(directory);
        if (!entry) return -errno;  /* 0 at the end; a failed read is the caller's error, not a short list */
        struct stat st = {.st_ino = entry->d_ino, .st_mode = (mode_t)entry->d_type << 12};
        if (fill(buffer, entry->d_name, &st, entry->d_off, 0)) return 0;
    }
}

static int fs_releasedir(const char *path, struct fuse_file_info *fi) {
    (void)path;
    closedir((DIR *)(uintptr_t)fi->fh);
    return 0;
}

static int fs_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)path;
    (void)datasync;
    return result(fsync(dirfd((DIR *)(uintptr_t)fi->fh)));
}

static int fs_mknod(const char *path, mode_t mode, dev_t device) {
    if (S_ISFIFO(mode)) return result(mkfifoat(backing, rel(path), mode));
    return result(mknodat(backing, rel(path), mode, device));
}

static int fs_mkdir(const char *path, mode_t mode) { return result(mkdirat(backing, rel(path), mode)); }
static int fs_unlink(const char *path) { return result(unlinkat(backing, rel(path), 0)); }
static int fs_rmdir(const char *path) { return result(unlinkat(backing, rel(path), AT_REMOVEDIR)); }

static int fs_symlink(const char *target, const char *path) {
    return result(symlinkat(target, backing, rel(path)));
}

static int fs_rename(const char *from, const char *to, unsigned int flags) {
    hold(from);
    return result((int)syscall(SYS_renameat2, backing, rel(from), backing, rel(to), flags));
}

static int fs_link(const char *from, const char *to) {
    return result(linkat(backing, rel(from), backing, rel(to), 0));
}

static int fs_chmod(const char *path, mode_t mode, struct fuse_file_info *fi) {
    if (fi) return result(fchmod((int)fi->fh, mode));
    return result(fchmodat(backing, rel(path), mode, 0));
}

static int fs_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi) {
    if (fi) return result(fchown((int)fi->fh, uid, gid));
    return result(fchownat(backing, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW));
}

static int fs_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
    if (fi) return result(ftruncate((int)fi->fh, size));
    int fd = openat(backing, rel(path), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int outcome = result(ftruncate(fd, size));
    close(fd);
    return outcome;
}

static int fs_utimens(const char *path, const struct timespec times[2], struct fuse_file_info *fi) {
    if (fi) return result(futimens((int)fi->fh, times));
    return result(utimensat(backing, rel(path), times, AT_SYMLINK_NOFOLLOW));
}

static int fs_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
    int fd = openat(backing, rel(path), fi->flags | O_CLOEXEC, mode);
    if (fd < 0) return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

static int fs_open(const char *path, struct fuse_file_info *fi) {
    int fd = openat(backing, rel(path), fi->flags | O_CLOEXEC);
    if (fd < 0) return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

static int fs_read(const char *path, char *buffer, size_t size, off_t offset, struct fuse_file_info *fi) {
    (void)path;
    ssize_t count = pread((int)fi->fh, buffer, size, offset);
    return count < 0 ? -errno : (int)count;
}

static int fs_write(const char *path, const char *buffer, size_t size, off_t offset,
                    struct fuse_file_info *fi) {
    (void)path;
    ssize_t count = pwrite((int)fi->fh, buffer, size, offset);
    return count < 0 ? -errno : (int)count;
}

static int fs_statfs(const char *path, struct statvfs *st) {
    (void)path;
    return result(fstatvfs(backing, st));
}

static int fs_flush(const char *path, struct fuse_file_info *fi) {
    (void)path;
    /* A close of a copy: what the caller's close would have reported (NFS reports here). */
    int copy = dup((int)fi->fh);
    if (copy < 0) return -errno;
    return result(close(copy));
}

static int fs_release(const char *path, struct fuse_file_info *fi) {
    (void)path;
    close((int)fi->fh);
    return 0;
}

static int fs_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)path;
    return result(datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh));
}

static const struct fuse_operations operations = {
    .init = fs_init,
    .getattr = fs_getattr,
    .access = fs_access,
    .readlink = fs_readlink,
    .opendir = fs_opendir,
    .readdir = fs_readdir,
    .releasedir = fs_releasedir,
    .fsyncdir = fs_fsyncdir,
    .mknod = fs_mknod,
    .mkdir = fs_mkdir,
    .unlink = fs_unlink,
    .rmdir = fs_rmdir,
    .symlink = fs_symlink,
    .rename = fs_rename,
    .link = fs_link,
    .chmod = fs_chmod,
    .chown = fs_chown,
    .truncate = fs_truncate,
    .utimens = fs_utimens,
    .create = fs_create,
    .open = fs_open,
    .read = fs_read,
    .write = fs_write,
    .statfs = fs_statfs,
    .flush = fs_flush,
    .release = fs_release,
    .fsync = fs_fsync,
};

int main(int argc, char *argv[]) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s BACKING MOUNTPOINT [FUSE options]\n", argv[0]);
        return 2;
    }
    backing = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (backing < 0) { perror(argv[1]); return 1; }
    /* The files this process makes get the modes their callers asked for. */
    umask(0);
    /* fuse_main's arguments: the program, the mount point, in the foreground, and the rest. */
    char *arguments[argc + 1];
    arguments[0] = argv[0];
    arguments[1] = argv[2];
    arguments[2] = "-f";
    for (int index = 3; index < argc; index++) arguments[index] = argv[index];
    arguments[argc] = NULL;
    return fuse_main(argc, arguments, &operations, NULL);
}
