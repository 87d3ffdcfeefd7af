#ifndef DOPESYNC_CFUZZERDRIVER_H
#define DOPESYNC_CFUZZERDRIVER_H
#include <stddef.h>
#include <stdint.h>

/// libFuzzer's driver (compiler-rt, FuzzerInterface.h): parses libFuzzer's command line and
/// calls `callback` with each input. It exists only in a binary linked with `-sanitize=fuzzer`.
/// The fuzz targets call it from their own `main`, so they need no top-level code and link
/// like any other SwiftPM executable.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
