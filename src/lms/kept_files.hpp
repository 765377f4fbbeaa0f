// The files the listener keeps open between the blocks it serves in place
// (src/lms/kept_files.cpp). Opening and closing a relation's file and
// pg_class's on every request was four of the nine file system calls a served
// block cost; an LMS worker still opens and closes them per request.
//
// A relation's file is kept only while nothing can have put another file at
// its path: no checkpoint has begun since it was opened (a dropped relation's
// first segment is unlinked only after one, so its number cannot be reused
// before), its database's relation map is the same file (a dropped,
// re-created or moved database writes a new one), it has a single segment
// open (a truncation by another process is not seen through a kept later
// segment), and the instance is not in recovery (redo unlinks at once).
// Anything else closes every kept file. docs/cache_fusion.md has the argument.
//
// PostgreSQL types: include only after postgres.h (glue files).
#pragma once

extern "C" {
#include "storage/smgr.h"
}

namespace pgrac::glue {

// Before a request: closes every kept file if a checkpoint began since they
// were opened, in recovery, or when not serving in place.
void kept_files_begin();

// smgropen, remembered so that kept_files_end can bound and check it.
SMgrRelation kept_files_open(RelFileNode rnode);

// Whether the fork is known to exist without asking the file system (it is
// open in a kept file and no checkpoint began); smgrexists closes and reopens
// it otherwise. Call it after the identity check.
bool kept_fork_is_open(SMgrRelation sr, ForkNumber fork);

// After a request that went well: keeps its files if serving in place and
// every rule above holds, else closes them all.
void kept_files_end();

// Between requests (the listener's loop): closes every kept file once a
// checkpoint began, so that a dropped relation's file is not held open.
void kept_files_idle();

// Closes every kept file (an error, a changed relation map).
void kept_files_close_all();

}  // namespace pgrac::glue
