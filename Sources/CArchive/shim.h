#ifndef DOPESYNC_CARCHIVE_SHIM_H
#define DOPESYNC_CARCHIVE_SHIM_H
#include <archive.h>
#include <archive_entry.h>
#endif
