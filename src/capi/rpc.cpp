// pgrac_ic_rpc (include/pgrac_ic/pgrac_ic.h): a request and its reply, for
// backends and workers. The caller's reply slot is armed, reply pool space
// reserved, the request queued (src/capi/send_path.hpp), and the reply waited for
// by polling, then on the latch, up to the timeout. Written without C++
// objects that have destructors: CHECK_FOR_INTERRUPTS() may longjmp out of
// the wait loops.
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pmsignal.h"
#include "storage/proc.h"
#include "storage/s_lock.h"
#include "utils/wait_event.h"
}

#include <sched.h>
#include <unistd.h>

#include <cstring>

#include "instance/guc.hpp"
#include "ic/base/adaptive_spin.hpp"
#include "ic/base/atomics.hpp"
#include "capi/requester_path.hpp"
#include "capi/send_path.hpp"
#include "instance/shmem.hpp"

using namespace pgrac::ic;

namespace {

// How long this backend polls for a reply before sleeping (learned).
AdaptiveSpin g_rpc_spin;

// A requester polls only while fewer requesters than spare CPUs poll: one
// more would only take turns (sched_yield) with the listener and the other
// pollers on a busy machine, and cost the CPU that serves the replies. The
// listener polls too, hence one CPU less.
bool take_spin_turn(IcShared* shm) {
    static const uint32_t max_spinners = [] {
        const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        return static_cast<uint32_t>(cpus > 2 ? cpus - 1 : 1);
    }();
    if (__atomic_fetch_add(&shm->rpc_spinners, 1u, __ATOMIC_RELAXED) < max_spinners) return true;
    __atomic_fetch_sub(&shm->rpc_spinners, 1u, __ATOMIC_RELAXED);
    return false;
}

// At the deadline: Waiting -> Idle, true. False if the reply arrived after
// all (Done, or Filling, which becomes Done in a few instructions).
bool give_up(ReplySlot* slot) {
    for (;;) {
        uint32_t expected = static_cast<uint32_t>(SlotState::Waiting);
        if (compare_exchange(&slot->state, &expected, static_cast<uint32_t>(SlotState::Idle)))
            return true;
        if (expected == static_cast<uint32_t>(SlotState::Done)) return false;
        if (expected == static_cast<uint32_t>(SlotState::Idle)) return true;
        pg_spin_delay();
    }
}

// Disarms the caller's slot after a timeout or an early failure: a reply that
// arrived meanwhile (Done) is discarded too. Once the slot is Idle no listener
// touches it, and its reply pool chunks go back.
void disarm(IcShared* shm, ReplySlot* slot) {
    if (!give_up(slot)) store_release(&slot->state, static_cast<uint32_t>(SlotState::Idle));
    slot_release(shm, slot);
}

// A process that exits (or dies of an ERROR's FATAL) during an RPC must not
// keep reply pool chunks: its slot is disarmed on the way out.
void rpc_at_exit(int, Datum) {
    IcShared* shm = pgrac::glue::shared();
    if (shm == nullptr || MyProc == nullptr) return;
    if (ReplySlot* slot = reply_slot(shm, static_cast<uint32_t>(MyProc->pgprocno)))
        disarm(shm, slot);
}

// Reserves reply space for up to reply_cap bytes, waiting for the shared pool
// until the deadline (not at all with PGRAC_IC_NOWAIT). A short pool is
// backpressure: counted, and the RPC fails with PGRAC_IC_QUEUE_FULL.
int reserve_reply_space(IcShared* shm, ReplySlot* slot, int node, uint32_t reply_cap, int flags,
                        uint64_t deadline) {
    while (!slot_reserve(shm, slot, reply_cap)) {
        const uint64_t now = monotonic_ns();
        if ((flags & PGRAC_IC_NOWAIT) || now >= deadline) {
            char text[160];
            snprintf(text, sizeof text,
                     "reply pool exhausted: no room for a %u-byte reply (cluster.reply_pool_size)",
                     reply_cap);
            shm->errors.add(ErrorType::QueueFull, Severity::Warning, node, unix_time_us(), text);
            return PGRAC_IC_QUEUE_FULL;
        }
        // Chunks come back when other RPCs end; poll for them every millisecond.
        ResetLatch(MyLatch);
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1,
                        PG_WAIT_EXTENSION);
        CHECK_FOR_INTERRUPTS();
    }
    return PGRAC_IC_OK;
}

// An RPC on this process's own lane to the node (capi/requester_path.hpp).
// The slot only gives the rpc_id its generation: it stays Idle, so no
// listener ever fills it. -1 if nothing was sent.
int requester_lane_rpc(IcShared* shm, ReplySlot* slot, uint32_t procno, int node, uint16_t msg_type,
                       uint32_t route_key, const void* body, uint32_t len, void* reply_buf,
                       uint32_t reply_cap, uint32_t* reply_len, int flags, uint64_t start,
                       uint64_t deadline) {
    const uint32_t gen = slot->generation + 1;
    slot->generation = gen;
    MessageHeader mh;
    mh.msg_type = msg_type;
    mh.route_key = route_key;
    mh.rpc_id = make_rpc_id(procno, gen);
    mh.epoch = load_relaxed(&shm->epoch);
    const uint16_t fflags = (flags & PGRAC_IC_CONTROL) ? kFlagControlLane : 0;
    g_rpc_spin.set_max_ns(static_cast<uint64_t>(pgrac_busy_poll_us) * 1000);
    const uint64_t budget = g_rpc_spin.budget_ns();
    const bool spinning = budget > 0 && take_spin_turn(shm);
    pgrac::glue::RequesterOutcome out;
    pgrac::glue::requester_rpc(shm, node, mh, fflags, body, len, reply_buf, reply_cap,
                               spinning ? budget : 0, deadline, &out);
    if (spinning) __atomic_fetch_sub(&shm->rpc_spinners, 1u, __ATOMIC_RELAXED);
    if (out.interrupted) {
        if (!PostmasterIsAlive()) proc_exit(1);
        CHECK_FOR_INTERRUPTS();
    }
    if (!out.taken) return -1;
    const uint64_t elapsed = monotonic_ns() - start;
    g_rpc_spin.observe(elapsed);
    if (reply_len != nullptr) *reply_len = out.reply_len;
    if (out.status == PGRAC_IC_OK) {
        if (PeerShared* p = peer_shared(shm, static_cast<uint32_t>(node)))
            p->rpc_latency.record(elapsed);
        shm->total_latency.record(elapsed);
    }
    return out.status;
}

// This process's reply slot, ready for a new RPC: the exit hook registered
// once, and a slot a previous RPC's cancel left armed disarmed.
ReplySlot* ready_reply_slot(IcShared* shm, uint32_t procno) {
    ReplySlot* slot = reply_slot(shm, procno);
    if (slot == nullptr) return nullptr;
    static bool exit_hook = false;
    if (!exit_hook) {
        before_shmem_exit(rpc_at_exit, 0);
        exit_hook = true;
    }
    disarm(shm, slot);
    return slot;
}

}  // namespace

extern "C" {

int pgrac_ic_rpc(int node, uint16_t msg_type, uint32_t route_key, const void* body, uint32_t len,
                 void* reply_buf, uint32_t reply_cap, uint32_t* reply_len, int flags,
                 int timeout_ms) {
    pgrac::glue::refuse_in_place();
    IcShared* shm = pgrac::glue::shared();
    if (shm == nullptr || MyProc == nullptr) return PGRAC_IC_NOT_RUNNING;
    if (msg_type == 0 || msg_type > PGRAC_IC_MAX_MSG_TYPE || (len > 0 && body == nullptr) ||
        (reply_cap > 0 && reply_buf == nullptr))
        return PGRAC_IC_BAD_ARGUMENT;
    if (len > PGRAC_IC_MAX_MESSAGE) return PGRAC_IC_TOO_BIG;  // on either path
    if (timeout_ms < 0) timeout_ms = pgrac_rpc_timeout_ms;
    const uint32_t procno = static_cast<uint32_t>(MyProc->pgprocno);
    ReplySlot* slot = ready_reply_slot(shm, procno);
    if (slot == nullptr) return PGRAC_IC_NOT_RUNNING;
    const uint64_t start = monotonic_ns();
    const uint64_t deadline = start + static_cast<uint64_t>(timeout_ms) * 1000000ull;
    if (pgrac::glue::requester_lane_usable(shm, node)) {
        const int direct =
            requester_lane_rpc(shm, slot, procno, node, msg_type, route_key, body, len, reply_buf,
                               reply_cap, reply_len, flags, start, deadline);
        if (direct >= 0) return direct;  // else nothing was sent: the listeners take it
    }
    int rc = reserve_reply_space(shm, slot, node, reply_cap, flags, deadline);
    if (rc != PGRAC_IC_OK) return rc;
    const uint32_t gen = slot->generation + 1;
    slot->generation = gen;
    const uint64_t rpc_id = make_rpc_id(procno, gen);
    store_release(&slot->rpc_id, rpc_id);
    store_release(&slot->state, static_cast<uint32_t>(SlotState::Waiting));

    MessageHeader mh;
    mh.msg_type = msg_type;
    mh.route_key = route_key;
    mh.rpc_id = rpc_id;
    mh.epoch = load_relaxed(&shm->epoch);
    const uint16_t fflags = kFlagRpcRequest | ((flags & PGRAC_IC_CONTROL) ? kFlagControlLane : 0);
    const uint64_t now = monotonic_ns();
    const int left_ms = now >= deadline ? 0 : static_cast<int>((deadline - now) / 1000000);
    rc = pgrac::glue::enqueue_message(node, fflags, mh, body, len, flags, left_ms);
    if (rc != PGRAC_IC_OK) {
        disarm(shm, slot);
        return rc;
    }

    // Busy-poll first: the reply usually comes sooner than a sleep and a
    // wakeup would take.
    g_rpc_spin.set_max_ns(static_cast<uint64_t>(pgrac_busy_poll_us) * 1000);
    if (const uint64_t budget = g_rpc_spin.budget_ns(); budget > 0 && take_spin_turn(shm)) {
        const uint64_t spin_end = monotonic_ns() + budget;
        while (load_acquire(&slot->state) != static_cast<uint32_t>(SlotState::Done) &&
               monotonic_ns() < spin_end)
            sched_yield();
        __atomic_fetch_sub(&shm->rpc_spinners, 1u, __ATOMIC_RELAXED);
    }
    for (;;) {
        ResetLatch(MyLatch);
        if (load_acquire(&slot->state) == static_cast<uint32_t>(SlotState::Done)) break;
        const uint64_t now = monotonic_ns();
        if (now >= deadline) {
            // Give up only if the slot is still Waiting: a reply that landed
            // (or is being copied in) at the deadline is taken, not dropped.
            if (!give_up(slot)) break;
            slot_release(shm, slot);
            char text[128];
            snprintf(text, sizeof text, "RPC (message type %u) to node %d timed out after %d ms",
                     msg_type, node, timeout_ms);
            shm->errors.add(ErrorType::RpcTimeout, Severity::Warning, node, unix_time_us(), text);
            return PGRAC_IC_TIMEOUT;
        }
        const long wait_ms = static_cast<long>((deadline - now + 999999) / 1000000);
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, wait_ms,
                        PG_WAIT_EXTENSION);
        CHECK_FOR_INTERRUPTS();
    }

    g_rpc_spin.observe(monotonic_ns() - start);
    // Done: the slot is ours until we set it Idle.
    rc = static_cast<int>(slot->status);
    uint32_t n = slot->len;
    if (n > reply_cap) {
        rc = (rc == PGRAC_IC_OK) ? PGRAC_IC_REPLY_TOO_BIG : rc;
        n = reply_cap;
    }
    read_slot(shm, slot, reply_buf, n);
    if (reply_len != nullptr) *reply_len = n;
    store_release(&slot->state, static_cast<uint32_t>(SlotState::Idle));
    slot_release(shm, slot);
    if (rc == PGRAC_IC_OK) {
        const uint64_t elapsed = monotonic_ns() - start;
        if (PeerShared* p = peer_shared(shm, static_cast<uint32_t>(node)))
            p->rpc_latency.record(elapsed);
        shm->total_latency.record(elapsed);
    }
    return rc;
}

}  // extern "C"

namespace pgrac::glue {

int requester_lane_call(int node, uint16_t msg_type, uint32_t route_key, const void* body,
                        uint32_t len, void* reply_buf, uint32_t reply_cap, uint32_t* reply_len,
                        int timeout_ms) {
    IcShared* shm = shared();
    if (shm == nullptr || MyProc == nullptr || len > PGRAC_IC_MAX_MESSAGE) return -1;
    if (!requester_lane_usable(shm, node)) return -1;
    const uint32_t procno = static_cast<uint32_t>(MyProc->pgprocno);
    ReplySlot* slot = ready_reply_slot(shm, procno);
    if (slot == nullptr) return -1;
    const uint64_t start = monotonic_ns();
    const uint64_t deadline = start + static_cast<uint64_t>(timeout_ms) * 1000000ull;
    return requester_lane_rpc(shm, slot, procno, node, msg_type, route_key, body, len, reply_buf,
                              reply_cap, reply_len, PGRAC_IC_CONTROL, start, deadline);
}

}  // namespace pgrac::glue
