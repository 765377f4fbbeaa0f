// The interconnect's shared-memory region: one per instance, created by the
// postmaster, used by the listener, the LMS workers and every backend.
// Plain integers and bytes only; rings and reply slots are found by offset.
//
//   IcShared | outbound ring | LMS inbox rings ... | reply slots ... | reply pool
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ic/session/cluster_settings.hpp"
#include "ic/base/error_log.hpp"
#include "ic/base/latency_histogram.hpp"
#include "ic/membership/membership.hpp"
#include "ic/base/node_list.hpp"
#include "ic/shm/reply_pool.hpp"
#include "ic/session/seq_check.hpp"
#include "ic/shm/shm_ring.hpp"
#include "pgrac_ic/pgrac_ic.h"

namespace pgrac::ic {

inline constexpr uint32_t kSharedMagic = 0x50524943;  // "PRIC"
inline constexpr int kMaxLmsWorkers = 16;
inline constexpr int kMaxLanes = 5;  // control lane + up to 4 bulk paths

enum class PeerState : uint32_t { Down = 0, Connecting, Up, Disconnecting, Error };
const char* peer_state_name(PeerState s);  // "DOWN", "CONNECTING", ...

// Per-peer state and counters. Written by the listener (state, wire counters)
// and by backends (queue accounting, RPC latency).
struct PeerShared {
    uint32_t node_id;  // 0 = slot unused
    uint32_t state;    // PeerState
    char address[96];  // host:port from cluster.nodes
    uint64_t incarnation;
    uint32_t epoch_seen;  // last membership epoch the peer carried
    uint32_t lanes_up;
    uint32_t lanes_total;
    uint32_t wire_protection;  // control lane's session: WireProtection + 1 (0: none yet)
    int64_t state_since_us;    // Unix time of the last state change
    int64_t last_heard_us;
    uint64_t rtt_ns;  // last heartbeat round trip

    uint64_t msgs_sent, msgs_recv, bytes_sent, bytes_recv;
    uint64_t rpcs_sent, rpcs_served;
    // Of the requests from this peer: served by the listener where they
    // arrived (no LMS handoff), and taken in place but handed to an LMS
    // because serving them would have waited (a block not in the buffer pool).
    uint64_t served_in_place, in_place_handoffs;
    // Of the replies to this peer: those sealed while they were written
    // (Engine::begin_sealed_reply): the cipher read the reply where the
    // handler found it, with no copy before it.
    uint64_t sealed_in_place;
    // Requester lanes (docs/architecture.md, "Requester lanes"): RPCs this
    // node's backends sent to the peer on their own connection, RPCs the
    // peer's backends sent us that way, and those connections now open.
    uint64_t direct_rpcs_sent, direct_rpcs_served;
    uint32_t requester_lanes, requester_lanes_pad;
    uint64_t retransmits, reconnects, duplicates_dropped;
    uint64_t requests_voided;  // retained RPC requests voided: their caller was told they failed
    uint64_t session_resets;   // lane sessions both sides started again (handshake)
    uint64_t backpressure_stalls;        // sends that waited or failed on a full queue
    uint64_t queued_msgs, queued_bytes;  // accepted for this peer, not yet acked
    uint64_t unacked_msgs;               // listener's view: sent, not acked
    uint64_t unacked_bytes;              // the same in frame bytes
    char last_error[160];
    // Agreement (ic/session/cluster_settings.hpp, ic/membership/membership.hpp): the peer's timing
    // from its last heartbeat, the instance admitted for its id, refusals of
    // its connections for settings that differ (the last reason kept) or for
    // another instance claiming its id.
    uint32_t peer_timeout_ms, heartbeat_interval_ms;
    uint64_t instance;
    uint64_t config_refusals, duplicate_refusals;
    char config_mismatch[160];
    // Built-in diagnostics, as the receiver: one-way notes taken by an LMS
    // worker (pgrac_ic_broadcast) and the exactly-once probe's high marks
    // (pgrac_ic_seq_rpc), both per source node.
    uint64_t notes_recv;
    uint64_t seq_last[kSeqStreams];

    LatencyHistogram rpc_latency;  // round trips measured by requesters
};

// The reply slot of one process (indexed by its PGPROC number). One RPC at a
// time per process. The requester arms it (Waiting + rpc_id), with chunks of
// the shared reply pool if the reply may not fit inline (ic/shm/reply_pool.hpp);
// the listener fills it (Filling -> Done) only if rpc_id still matches; a
// requester that gives up moves Waiting -> Idle, so a late reply is dropped.
// The requester returns its chunks once the slot is Idle again.
enum class SlotState : uint32_t { Idle = 0, Waiting = 1, Filling = 2, Done = 3 };
struct ReplySlot {
    uint64_t rpc_id;
    uint32_t state;   // SlotState
    uint32_t status;  // pgrac_ic_status
    uint32_t len;
    uint32_t generation;  // bumped by the owner for each RPC
    uint32_t n_chunks;    // reply pool chunks reserved; 0: the reply fits inline
    uint32_t chunks[kReplyMaxChunks];
    uint8_t inline_data[kReplyInlineBytes];
};
// Bytes a reply may have in this slot as armed.
inline uint32_t slot_capacity(const ReplySlot* slot) {
    const uint32_t cap = kReplyInlineBytes + slot->n_chunks * kReplyChunkBytes;
    return cap < PGRAC_IC_MAX_MESSAGE ? cap : PGRAC_IC_MAX_MESSAGE;
}

inline constexpr size_t kDescMax = 256;

struct RdmaStatusShared {
    char hca_name[64];
    char hca_vendor[64];
    char link_layer[32];
    char port_state[32];
    int32_t mtu;
    int32_t numa_node;
    char xrc[64];
    char dcqcn[64];
    char hugepage_size[32];
    char numa_binding[64];
    int32_t cq_depth;
    int32_t pad;
    char verify_issues[1024];
};

struct IcShared {
    uint32_t magic;
    uint32_t my_node_id;
    uint32_t n_lms;
    uint32_t n_slots;
    uint32_t tier_requested;  // tiers::Tier
    uint32_t tier_active;     // tiers::Tier
    char tier_reason[kDescMax];
    uint64_t incarnation;
    uint32_t epoch;           // committed membership epoch (copy of membership's)
    int32_t listener_procno;  // -1 until the listener runs
    uint32_t listener_ready;  // 1 once the transport is listening
    int32_t lms_procno[kMaxLmsWorkers];
    int64_t started_us;
    // Requesters busy-polling for a reply right now: past one per spare CPU
    // they would only take turns with the processes they wait for.
    uint32_t rpc_spinners;

    RdmaStatusShared rdma;
    // Transport-wide counters of the verbs tiers (zero elsewhere).
    uint64_t mr_cache_hits, mr_cache_misses, cq_overflows, qp_errors;
    // Also verbs only, published by the listener (verbs_glue.cpp): send and
    // receive completions of frames, and CQ/SRQ rebuilds after an overflow.
    uint64_t verbs_sends, verbs_recvs, cq_rebuilds;
    // Frames written into requester lanes' landing slots (RDMA WRITE), and
    // frames whose payload the device read in place (no copy into a slot).
    uint64_t rdma_writes, zero_copy_sends;

    PeerShared peers[kMaxNodes];  // index node_id - 1
    LatencyHistogram total_latency;
    ErrorLog errors;
    MembershipShared membership;  // views, vote, lease, history (ic/membership/membership.hpp)
    ClusterSettings settings;     // what the handshake sends (ic/session/cluster_settings.hpp)

    uint64_t outbound_off;  // byte offsets from the start of this struct
    uint64_t inbox_off[kMaxLmsWorkers];
    uint64_t slots_off;
    uint64_t reply_pool_off;
};

// Shared memory holds plain data only: no pointers, no std:: types, nothing
// with a constructor that must run per process.
template <typename T>
inline constexpr bool kShareable = std::is_trivially_copyable_v<T>&& std::is_standard_layout_v<T>;
static_assert(kShareable<PeerShared> && kShareable<ReplySlot> && kShareable<RdmaStatusShared> &&
              kShareable<IcShared> && kShareable<MembershipShared>);

struct SharedSizing {
    uint32_t n_lms = 2;
    uint32_t n_slots = 0;  // PGPROC count
    size_t outbound_ring_bytes = 16u << 20;
    size_t inbox_ring_bytes = 8u << 20;
    uint32_t reply_pool_chunks = 2048;  // cluster.reply_pool_size / kReplyChunkBytes
};

// Prefix of every ring record: destination (outbound) or source (inbox) node,
// frame flags; the payload (MessageHeader + body) follows.
struct RingPrefix {
    uint16_t node;
    uint16_t flags;
    uint32_t payload_len;
};
static_assert(sizeof(RingPrefix) == 8 && kShareable<RingPrefix>);

size_t shared_size(const SharedSizing& s);
// Lays out and zeroes the region (postmaster, once).
IcShared* shared_init(void* region, const SharedSizing& s);

ShmRing outbound_ring(IcShared* shm);
ShmRing inbox_ring(IcShared* shm, uint32_t lms);
ReplySlot* reply_slot(IcShared* shm, uint32_t slot);
ReplyPoolShared* reply_pool(IcShared* shm);
inline PeerShared* peer_shared(IcShared* shm, uint32_t node_id) {
    return (node_id >= 1 && node_id <= static_cast<uint32_t>(kMaxNodes) &&
            shm->peers[node_id - 1].node_id == node_id)
               ? &shm->peers[node_id - 1]
               : nullptr;
}

// rpc_id = slot << 32 | generation
inline uint64_t make_rpc_id(uint32_t slot, uint32_t gen) {
    return (static_cast<uint64_t>(slot) << 32) | gen;
}
inline uint32_t rpc_slot(uint64_t rpc_id) {
    return static_cast<uint32_t>(rpc_id >> 32);
}

// Completes an RPC waiting in `slot` if rpc_id still matches. True if delivered.
// A reply longer than the slot's capacity is cut there, with its full length
// in `len` (the requester reports PGRAC_IC_REPLY_TOO_BIG).
bool complete_slot(IcShared* shm, ReplySlot* slot, uint64_t rpc_id, uint32_t status,
                   const uint8_t* body, uint32_t len);
// The requester's side: copies up to `n` bytes (n <= slot_capacity) of a Done
// slot's reply to `dst`.
void read_slot(IcShared* shm, const ReplySlot* slot, void* dst, uint32_t n);
// Reserves pool chunks for a reply of up to reply_cap bytes (none if it fits
// inline; false: the pool is short), and returns them after the RPC. Only the
// slot's owner calls these, and only while the slot is Idle: then no listener
// touches the chunks.
bool slot_reserve(IcShared* shm, ReplySlot* slot, uint32_t reply_cap);
void slot_release(IcShared* shm, ReplySlot* slot);

int64_t unix_time_us();
uint64_t monotonic_ns();
// CLOCK_BOOTTIME: the membership's and the leases' clock (ic/membership/membership.hpp).
uint64_t boottime_ns();

}  // namespace pgrac::ic
