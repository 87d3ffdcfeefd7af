#ifndef C_SYSTEM_CALLS_H
#define C_SYSTEM_CALLS_H

// GNU extensions of glibc that Swift's Glibc module does not declare, called directly: no
// lookup at run time.

/// pipe2(descriptors, O_CLOEXEC): both ends close-on-exec from the start. pipe() then
/// fcntl(FD_CLOEXEC) leaves a moment in which another thread's fork inherits the ends.
/// 0, or -1 with errno set.
int dopesync_pipe_close_on_exec(int descriptors[2]);

/// renameat2(AT_FDCWD, source, AT_FDCWD, target, RENAME_NOREPLACE): the rename fails with
/// EEXIST rather than replace the target. 0, or -1 with errno set (EINVAL where the file system
/// refuses the flag, ENOSYS where the kernel lacks the call).
int dopesync_rename_no_replace(const char *source, const char *target);

/// open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC): a descriptor that names the file and reads
/// nothing, so a file this user may not read can still be held. -1 with errno set (ENOSYS
/// where the system has no O_PATH).
int dopesync_open_path_only(const char *path);

/// pidfd_open(pid, 0): a descriptor that polls readable once process `pid` has ended, which
/// lets a process wait for one that is not its child without polling its state. -1 with errno set
/// (ESRCH: no such process; ENOSYS where the kernel lacks the call, before Linux 5.3).
int dopesync_pidfd_open(int pid);

/// Whether the kernel says its clock is synchronized (adjtimex: a state other than TIME_ERROR,
/// STA_UNSYNC clear), as an NTP daemon (chrony, systemd-timesyncd, ntpd) keeps it: 1 or 0; -errno
/// when it cannot be asked (a sandbox that refuses adjtimex, as systemd's ProtectClock= does).
int dopesync_clock_synchronization(void);

/// fcntl(descriptor, F_OFD_SETLK) of a write lock on the one byte at `offset` (F_WRLCK), or of
/// no lock on the whole file (F_UNLCK, with `lock` 0): a lock of the open file description, which
/// another descriptor of the same process does not share, and which ends when the last
/// descriptor of it closes. Tried again when a signal interrupts it. 0, or the errno (EAGAIN or
/// EACCES: another description holds the byte; EINVAL where the kernel lacks OFD locks).
int dopesync_ofd_lock_byte(int descriptor, long long offset, int lock);

#endif
