// LeakSanitizer's suppressions for every binary of the package (`make sanitize`). The sanitizer
// runtime calls this hook at start in an ASan build; in any other build nothing calls it. They
// live in the binary rather than in an LSAN_OPTIONS file so that the processes the tests start
// with an empty environment (`env -i`, as cron does) get them too.
//
// Each is a false positive of LSan on Swift: a block it reports leaked is held through a pointer
// that Swift keeps packed, where LSan cannot see it.
// - formWeakReference: a weak reference gives its object a side table, whose address Swift stores
//   shifted and flagged inside the object's refcount word (seen from Foundation's Process).
// - _makePerpetualStarted: swift-nio's process-wide blocking pool (NIOThreadPool.singleton) lives
//   for the whole process by design; its work queue sits in an enum payload whose spare bits hold
//   the case tag. The pattern matches the mangled name (`..._makePerpetualStartedC0...`), which
//   is what LSan's symbolizer shows. What the queue holds is reported as indirect leaks of it
//   and suppressed with it.
// - SpoolCallsO4pool_WZ: the spool's own pool (`SpoolCalls.pool`, eight threads, started on first
//   use) is the same: a NIOThreadPool for the whole process, its queue in the same enum payload.
//   The pattern is its static initializer's mangled name, so only what starting the pool
//   allocates is matched, not what the calls run on it allocate.
// - libXCTest.so: the test runner's XCTest half (every `swift test` runs it, with no XCTest test
//   here) leaves its suite-run objects to the process's exit; reported at the end of the run.
//   Matched by module: only the test runner links XCTest.
//
// print_suppressions=0: LSan otherwise lists the suppressions it used on standard error at exit,
// and a `dopesync run` that used NIO's blocking pool (every run: its settings are read there) would
// add that list to what an operator, or a test, reads.
#include "CLeakSuppressions.h"

const char *__lsan_default_options(void) {
    return "print_suppressions=0";
}

const char *__lsan_default_suppressions(void) {
    return "leak:formWeakReference\n"
           "leak:_makePerpetualStarted\n"
           "leak:SpoolCallsO4pool_WZ\n"
           "leak:libXCTest.so\n";
}
