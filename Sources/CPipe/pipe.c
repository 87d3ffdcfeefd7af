#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>

#include "CPipe.h"

int dopesync_pipe_close_on_exec(int descriptors[2]) {
    return pipe2(descriptors, O_CLOEXEC);
}
