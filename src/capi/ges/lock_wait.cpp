// The waiting half of a global lock request (lock_wait.hpp): the backend's
// wait slot, the latch wait for the answer its LMS delivers, the withdraw on
// timeout, cancel or error, and the exit hook. The request itself is
// lock_client.cpp's.
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/wait_event.h"
}

#include "capi/ges/lock_client.hpp"
#include "capi/ges/lock_wait.hpp"
#include "ic/ges/node_cache.hpp"
#include "ic/base/atomics.hpp"
#include "instance/shmem.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;

namespace pgrac::glue {

namespace {

bool g_used = false;      // sent at least one request: clean up at exit
bool g_callback = false;  // exit callback registered
uint64_t g_id_high = 0;
uint32_t g_id_low = 0;

// The request being waited for, for the error path.
struct Pending {
    bool active;
    GesRequest rq;
    uint32_t lms_starts;  // to send it again if its LMS worker restarts meanwhile
};
Pending g_pending;

// Backend exit. The ReleaseAll is a courtesy that makes the release prompt:
// if it cannot be queued (listener restarting, ring full) the LMS reaper
// releases the locks anyway once it sees the slot is no longer ours
// (clearing slot->pid below is what it looks for).
void ges_at_exit(int, Datum) {
    GesWaitSlot* slot = ges_my_slot();
    // A grant this backend took itself (direct routing) stays in the slot
    // until the LMS has the relay, which is in its queue already: a slot
    // cleared first would make the LMS give the lock back (its Release, also
    // queued, would then find nothing to keep in the node's cache). Bounded:
    // an LMS that does not come gives the lock back, which is safe.
    if (slot != nullptr) {
        for (int i = 0; i < 1000 && (load_acquire(&slot->word) & 0xff) == kGesSelfGranted; i++)
            pg_usleep(1000L);
    }
    if (g_used) (void)ges_send_release_all(1000);
    ges_forget_held();
    g_pending.active = false;
    if (slot) {
        store_release(&slot->word, uint64_t{0});
        store_release(&slot->pid, 0);
    }
}

// The LMS worker of the pending request restarted: the old process may have
// taken the request without recording it. Send it again (same id: a worker
// that has it ignores the copy, or delivers its grant again).
void resend_if_lms_restarted() {
    GesShared* g = ges_shared();
    GesWaitSlot* slot = ges_my_slot();
    if (!g_pending.active || g == nullptr || slot == nullptr) return;
    // Answered meanwhile: nothing to send.
    const uint32_t st = static_cast<uint32_t>(load_acquire(&slot->word) & 0xff);
    if (st != kGesWaiting && st != kGesDirectReady) return;
    const GesRequest& rq = g_pending.rq;
    const uint32_t w = ges_shard_of(rq.resource);
    const uint32_t starts = load_acquire(&g->lms_starts[w]);
    if (starts == g_pending.lms_starts) return;
    g_pending.lms_starts = starts;
    (void)ges_send_client(rq.cached ? GesMsgType::Convert : GesMsgType::Request, &rq.resource,
                          route_key_for(rq.resource), rq.mode, rq.id, rq.flags, rq.timeout_ms,
                          DenyReason::Cancelled, 1000, &rq.value);
}

}  // namespace

// Ids name this backend's slot and session (src/instance/ges_shmem.hpp); ges_prepare()
// sets g_id_high when the backend takes its slot.
uint64_t ges_next_request_id() {
    if (++g_id_low == 0) g_id_low = 1;
    return g_id_high | g_id_low;
}

uint64_t ges_last_request_id() {
    return g_id_high != 0 && g_id_low != 0 ? (g_id_high | g_id_low) : 0;
}

bool ges_session_used() {
    return g_used;
}

GesWaitSlot* ges_prepare() {
    GesWaitSlot* slot = ges_my_slot();
    if (shared() == nullptr || slot == nullptr)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("pgrac_ic global locks need pgrac_ic in shared_preload_libraries")));
    if (!g_callback) {
        before_shmem_exit(ges_at_exit, 0);
        g_callback = true;
    }
    if (g_id_high == 0 || load_relaxed(&slot->pid) != MyProcPid) {
        // A new session in this slot: a new tag, so that the reaper tells the
        // previous owner (maybe with the same pid) from this one.
        const uint32_t session = load_relaxed(&slot->session) + 1;
        store_release(&slot->session, session);
        store_release(&slot->word, uint64_t{0});
        store_release(&slot->pid, static_cast<int32_t>(MyProcPid));
        g_id_high = ges_request_id_base(static_cast<uint32_t>(MyProc->pgprocno), session);
    }
    return slot;
}

void ges_arm(GesWaitSlot* slot, const GesRequest& rq) {
    // A grant this backend took itself (direct routing) is in the slot until
    // the LMS has it (a moment: the relay is in its queue already).
    while ((load_acquire(&slot->word) & 0xff) == kGesSelfGranted) {
        ResetLatch(MyLatch);
        if ((load_acquire(&slot->word) & 0xff) != kGesSelfGranted) break;
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1,
                        PG_WAIT_EXTENSION);
        CHECK_FOR_INTERRUPTS();
    }
    GesShared* gs = ges_shared();
    g_pending =
        Pending{true, rq, gs ? load_acquire(&gs->lms_starts[ges_shard_of(rq.resource)]) : 0};
    store_release(&slot->request_id, rq.id);
    store_release(&slot->word, ges_slot_word(rq.id, kGesWaiting));
    g_used = true;
}

void ges_disarm(GesWaitSlot* slot) {
    g_pending.active = false;
    // A grant taken by this backend itself stays until its LMS frees it.
    if ((load_acquire(&slot->word) & 0xff) != kGesSelfGranted)
        store_release(&slot->word, uint64_t{0});
}

void ges_abandon(GesWaitSlot* slot, DenyReason why) {
    if (!g_pending.active) return;
    g_pending.active = false;
    const uint64_t id = g_pending.rq.id;
    const ResourceName r = g_pending.rq.resource;
    const uint32_t rk = route_key_for(r);
    // A down-conversion is never withdrawn (lock_client.cpp): the caller
    // takes it as made, and a grant that won the race is kept.
    const GesRequest& rq = g_pending.rq;
    const bool down = rq.was_held && rq.mode != rq.prior && mode_at_most(rq.mode, rq.prior);
    HOLD_INTERRUPTS();
    // Withdraw a wait (Waiting, or DirectReady: open to this backend's own
    // completion) by swapping it to Idle; an LMS in the middle of delivering
    // the answer finishes first.
    uint64_t expected = load_acquire(&slot->word);
    for (;;) {
        const uint32_t st = static_cast<uint32_t>(expected & 0xff);
        if ((expected >> 32) == (id & 0xffffffffu) &&
            (st == kGesWaiting || st == kGesDirectReady)) {
            if (compare_exchange(&slot->word, &expected, uint64_t{0})) {
                expected = ges_slot_word(id, kGesWaiting);  // withdrawn
                break;
            }
            continue;
        }
        if (st != kGesDelivering) break;
        pg_spin_delay();
        expected = load_acquire(&slot->word);
    }
    if ((expected & 0xff) == kGesSelfGranted) {
        // Taken by this backend itself, but its relay to the LMS failed: the
        // LMS still has the request waiting; give the grant back through it.
        (void)ges_send_client(GesMsgType::Release, &r, rk, LockMode::NL, 0, 0, 0,
                              DenyReason::Cancelled, 1000);
    } else if ((expected & 0xff) == kGesWaiting && (expected >> 32) == (id & 0xffffffffu)) {
        if (!down || rq.cached)
            (void)ges_send_client(GesMsgType::Cancel, &r, rk, LockMode::NL, id, 0, 0, why, 1000);
    } else if ((expected & 0xff) == kGesGranted && down) {
        // kept: made at the master
    } else if ((expected & 0xff) == kGesGranted) {
        const uint64_t token = load_acquire(&slot->token);
        if (!g_pending.rq.was_held && (token & (kCacheTokenRange - 1)) != 0)
            ges_drop_cache_use(r, g_pending.rq.mode);  // served from the node's cache
        else if (g_pending.rq.was_held)
            (void)ges_send_client(GesMsgType::Request, &r, rk, g_pending.rq.prior,
                                  ges_next_request_id(), 0, 0, DenyReason::Cancelled, 1000);
        else
            (void)ges_send_client(GesMsgType::Release, &r, rk, LockMode::NL, 0, 0, 0,
                                  DenyReason::Cancelled, 1000);
    }
    store_release(&slot->word, uint64_t{0});
    RESUME_INTERRUPTS();
}

void ges_wait_answer(GesWaitSlot* slot, int timeout_ms, int64_t limit_ms, uint64_t* word,
                     bool* timed_out) {
    const uint64_t start = monotonic_ns();
    for (;;) {
        ResetLatch(MyLatch);
        *word = load_acquire(&slot->word);
        while ((*word & 0xff) == kGesDelivering) {  // an LMS is writing the answer: a moment
            pg_spin_delay();
            *word = load_acquire(&slot->word);
        }
        if ((*word & 0xff) != kGesWaiting && (*word & 0xff) != kGesDirectReady) return;
        long wait_ms = 1000;
        if (limit_ms >= 0) {
            const int64_t left =
                limit_ms - static_cast<int64_t>((monotonic_ns() - start) / 1000000);
            if (left <= 0) {
                ges_abandon(slot, DenyReason::Timeout);
                // The answer may have won the race: ges_abandon() gave it back.
                if (timeout_ms == 0)
                    ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
                                    errmsg("no answer from the master of global lock within %lld "
                                           "ms",
                                           static_cast<long long>(limit_ms))));
                *timed_out = true;
                return;
            }
            wait_ms = Min(wait_ms, static_cast<long>(left));
        }
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, wait_ms,
                        PG_WAIT_EXTENSION);
        CHECK_FOR_INTERRUPTS();
        resend_if_lms_restarted();
    }
}

}  // namespace pgrac::glue
