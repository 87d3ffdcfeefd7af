#ifndef C_LEAK_SUPPRESSIONS_H
#define C_LEAK_SUPPRESSIONS_H

/// LeakSanitizer's built-in suppressions for every binary of the package (see the .c file).
const char *__lsan_default_suppressions(void);

/// LeakSanitizer's built-in options (see the .c file).
const char *__lsan_default_options(void);

#endif
