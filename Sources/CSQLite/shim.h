#ifndef DOPESYNC_CSQLITE_SHIM_H
#define DOPESYNC_CSQLITE_SHIM_H
#include <sqlite3.h>

/* sqlite3_db_config is variadic, which Swift cannot call. Closing a connection then leaves the
   WAL for the next writer to checkpoint instead of writing it back. */
static inline int dopesync_sqlite3_no_checkpoint_on_close(sqlite3 *db) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
}

/* sqlite3_config is variadic too. Without memory statistics, SQLite's allocator takes no global
   mutex and keeps no counters on every allocation. */
static inline int dopesync_sqlite3_memory_statistics_off(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
#endif
