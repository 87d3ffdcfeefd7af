#ifndef C_PIPE_H
#define C_PIPE_H

/// pipe2(descriptors, O_CLOEXEC): both ends close-on-exec from the start. Swift's Glibc module
/// does not declare pipe2 (a GNU extension), and pipe() then fcntl(FD_CLOEXEC) leaves a moment
/// in which another thread's fork inherits the ends. 0, or -1 with errno set.
int dopesync_pipe_close_on_exec(int descriptors[2]);

#endif
