// The listener keeps its AccessShareLock on the database it last served a
// block of between requests (src/lms/held_db_lock.cpp). Taking and releasing
// that session lock on every request went through the shared lock table (no
// fast path: the listener has no database), about a sixth of a served
// block's cost; with the lock held, a request's own acquire and release only
// count in the process-local lock table.
//
// Nothing waits more than a millisecond longer because of it: the lock is given up
// as soon as another process waits for a conflicting mode (DROP DATABASE,
// ALTER DATABASE ... SET TABLESPACE or RENAME; checked at least every
// millisecond from the listener's loop, which never waits for a lock itself),
// after 10 ms without a request for that database, on any error, and when the
// process exits. No PostgreSQL code asks for a conflicting lock on a database
// without waiting, so a conditional locker is never refused because of it.
//
// PostgreSQL types: include only after postgres.h (glue files).
#pragma once

extern "C" {
#include "postgres.h"
}

namespace pgrac::glue {

// After a request served in place under db's lock (db is not InvalidOid):
// keeps one more reference to the lock, giving up one on another database.
void held_db_lock_keep(Oid db);

// The listener's loop: gives the lock up when someone waits for it or it
// has not been used for a while.
void held_db_lock_idle();

// How long the listener may sleep before held_db_lock_idle must look again:
// -1 (no limit) when nothing is held.
int held_db_lock_wait_ms();

// Gives the lock up now (a handler error; turning serving in place off
// leaves it to the idle release).
void held_db_lock_release();

// Registered once per process that serves blocks: at exit, releases every
// session lock it still holds (this one, and a request's if a FATAL
// interrupted it), so that a restarted listener or LMS worker never leaves a
// database or relation locked behind it.
void release_session_locks_at_exit();

}  // namespace pgrac::glue
