extern "C" {
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/wait_event.h"
}

#include <sys/uio.h>

#include "instance/guc.hpp"
#include "capi/requester_path.hpp"
#include "capi/handler_registry.hpp"
#include "ic/base/atomics.hpp"
#include "capi/send_path.hpp"
#include "instance/shmem.hpp"

using namespace pgrac::ic;

namespace pgrac::glue {

namespace {

constexpr long kFullQueuePollMs = 1;

void give_back_room(PeerShared* p, uint64_t frame_bytes);

// Takes room for one frame in the peer's send budget, or nothing if it does
// not fit. Add first, then check, so that concurrent senders cannot all see
// room and overshoot together. Control traffic (GES, heartbeats' kin) may go
// a quarter beyond the limits that bulk traffic stops at: lock traffic never
// waits for room behind block traffic.
bool take_room(PeerShared* p, uint64_t frame_bytes, bool control) {
    uint64_t max_bytes = static_cast<uint64_t>(pgrac_send_queue_max_kb) * 1024;
    uint64_t max_msgs = static_cast<uint64_t>(pgrac_send_queue_max_messages);
    if (control) {
        max_bytes += max_bytes / 4;
        max_msgs += max_msgs / 4;
    }
    const uint64_t bytes = fetch_add(&p->queued_bytes, frame_bytes) + frame_bytes;
    const uint64_t msgs = fetch_add(&p->queued_msgs, uint64_t{1}) + 1;
    if (bytes <= max_bytes && msgs <= max_msgs) return true;
    give_back_room(p, frame_bytes);
    return false;
}

void give_back_room(PeerShared* p, uint64_t frame_bytes) {
    __atomic_fetch_sub(&p->queued_msgs, uint64_t{1}, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&p->queued_bytes, frame_bytes, __ATOMIC_RELAXED);
}

// The last eighth of the outbound ring is kept for control traffic.
bool ring_has_room_for(const ShmRing& ring, uint64_t record_bytes, bool control) {
    if (control) return true;
    return ring.used_bytes() + record_bytes + ring.capacity() / 8 <= ring.capacity();
}

bool peer_is_down(const IcShared* shm, const PeerShared* peer, int node) {
    if (node == static_cast<int>(shm->my_node_id)) return false;
    const auto state = static_cast<PeerState>(load_relaxed(&peer->state));
    return state == PeerState::Down || state == PeerState::Error;
}

}  // namespace

bool node_is_known(int node) {
    IcShared* shm = shared();
    return shm != nullptr && node >= 1 && node <= kMaxNodes &&
           peer_shared(shm, static_cast<uint32_t>(node)) != nullptr;
}

void refuse_in_place() {
    if (serving_in_place())
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("a pgrac_ic handler registered in place may not send messages, "
                               "RPCs, global lock or block requests"),
                        errhint("Register it without PGRAC_IC_HANDLER_IN_PLACE: an LMS worker "
                                "may.")));
}

int enqueue_message(int node, uint16_t flags, const MessageHeader& mh, const void* body,
                    uint32_t len, int api_flags, int timeout_ms) {
    refuse_in_place();  // the last line; the entry points check first
    IcShared* shm = shared();
    if (shm == nullptr || load_acquire(&shm->listener_ready) == 0) return PGRAC_IC_NOT_RUNNING;
    if (len > PGRAC_IC_MAX_MESSAGE) return PGRAC_IC_TOO_BIG;
    if (!node_is_known(node)) return PGRAC_IC_UNKNOWN_NODE;
    PeerShared* peer = peer_shared(shm, static_cast<uint32_t>(node));
    if (peer_is_down(shm, peer, node)) return PGRAC_IC_UNREACHABLE;

    uint8_t mhbuf[kMessageHeaderSize];
    encode_message_header(mh, mhbuf);
    RingPrefix pre{static_cast<uint16_t>(node), flags,
                   static_cast<uint32_t>(kMessageHeaderSize + len)};
    iovec iov[3] = {{&pre, sizeof pre}, {mhbuf, sizeof mhbuf}, {const_cast<void*>(body), len}};
    const uint64_t frame_bytes = kFrameHeaderSize + pre.payload_len;
    ShmRing ring = outbound_ring(shm);

    const bool control = (api_flags & PGRAC_IC_CONTROL) != 0;
    const uint64_t start = monotonic_ns();
    bool stalled = false;
    for (;;) {
        if (take_room(peer, frame_bytes, control)) {
            if (ring_has_room_for(ring, sizeof pre + pre.payload_len, control) &&
                ring.push(iov, len > 0 ? 3 : 2) == ShmRing::Push::Ok)
                break;
            give_back_room(peer, frame_bytes);
        }
        // A peer that went DOWN while we waited will not drain its queue:
        // waiting on would hang (an LMS reply waits without a time limit).
        if (peer_is_down(shm, peer, node)) return PGRAC_IC_UNREACHABLE;
        if (load_acquire(&shm->listener_ready) == 0) return PGRAC_IC_NOT_RUNNING;
        if (ShutdownRequestPending) return PGRAC_IC_NOT_RUNNING;  // a worker being stopped
        if (!stalled) {
            count(&peer->backpressure_stalls);
            stalled = true;
        }
        const bool expired = timeout_ms >= 0 && monotonic_ns() - start >=
                                                    static_cast<uint64_t>(timeout_ms) * 1000000ull;
        if ((api_flags & PGRAC_IC_NOWAIT) || expired) {
            char text[160];
            snprintf(text, sizeof text,
                     "send queue to node %d full (%llu messages, %llu bytes queued)", node,
                     static_cast<unsigned long long>(load_relaxed(&peer->queued_msgs)),
                     static_cast<unsigned long long>(load_relaxed(&peer->queued_bytes)));
            shm->errors.add(ErrorType::QueueFull, Severity::Warning, node, unix_time_us(), text);
            return PGRAC_IC_QUEUE_FULL;
        }
        wake_procno(load_acquire(&shm->listener_procno));
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, kFullQueuePollMs,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
    }
    wake_procno(load_acquire(&shm->listener_procno));
    // A one-way message: this process's RPCs to the node must not overtake it.
    if (!(flags & (kFlagRpcRequest | kFlagRpcReply))) note_one_way_message(node);
    return PGRAC_IC_OK;
}

}  // namespace pgrac::glue
