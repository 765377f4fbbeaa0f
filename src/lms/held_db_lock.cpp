// Keeps the listener's session lock on one database between the block
// requests it serves in place (held_db_lock.hpp).
extern "C" {
#include "postgres.h"

#include "catalog/pg_database_d.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
}

#include "ic/shm/shared_state.hpp"
#include "lms/held_db_lock.hpp"

namespace pgrac::glue {

namespace {

constexpr uint64_t kWaiterCheckNs = 1000 * 1000;  // 1 ms
constexpr uint64_t kIdleNs = 10 * 1000 * 1000;    // 10 ms

Oid g_db = InvalidOid;  // the database whose lock is held, if any
uint64_t g_last_used = 0;
uint64_t g_last_check = 0;

LOCKTAG tag_of(Oid db) {
    LOCKTAG tag;
    SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, db, 0);
    return tag;
}

void exit_callback(int, Datum) {
    // An ERROR turned FATAL may have left lightweight locks behind; the lock
    // table's own partition locks among them would make the release hang.
    HOLD_INTERRUPTS();
    LWLockReleaseAll();
    LockReleaseSession(DEFAULT_LOCKMETHOD);
    g_db = InvalidOid;
}

}  // namespace

void held_db_lock_keep(Oid db) {
    g_last_used = ic::monotonic_ns();
    if (g_db == db) return;
    held_db_lock_release();
    // The request holds it now: one more reference, counted locally.
    LOCKTAG tag = tag_of(db);
    if (LockAcquire(&tag, AccessShareLock, true, true) == LOCKACQUIRE_NOT_AVAIL) return;
    g_db = db;
    g_last_check = g_last_used;
}

void held_db_lock_idle() {
    if (g_db == InvalidOid) return;
    const uint64_t now = ic::monotonic_ns();
    if (now - g_last_used >= kIdleNs) {
        held_db_lock_release();
        return;
    }
    if (now - g_last_check < kWaiterCheckNs) return;
    g_last_check = now;
    LOCKTAG tag = tag_of(g_db);
    if (!LockHeldByMe(&tag, AccessShareLock)) {
        g_db = InvalidOid;  // released behind our back (a handler's aborted transaction)
        return;
    }
    if (LockHasWaiters(&tag, AccessShareLock, true)) held_db_lock_release();
}

int held_db_lock_wait_ms() {
    return g_db == InvalidOid ? -1 : 1;
}

void held_db_lock_release() {
    if (g_db == InvalidOid) return;
    LOCKTAG tag = tag_of(g_db);
    g_db = InvalidOid;
    LockRelease(&tag, AccessShareLock, true);
}

void release_session_locks_at_exit() {
    before_shmem_exit(exit_callback, 0);
}

}  // namespace pgrac::glue
