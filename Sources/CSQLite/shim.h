#ifndef DOPESYNC_CSQLITE_SHIM_H
#define DOPESYNC_CSQLITE_SHIM_H
#include <sqlite3.h>
#endif
