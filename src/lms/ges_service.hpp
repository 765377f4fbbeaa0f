// The GES glue in the LMS workers (src/lms/ges_service.cpp): each worker
// masters its shard of resources (route_key % n_lms) in a ges::LockTable and
// keeps this node's client side of the same shard in a ges::ClientRegistry.
// docs/ges.md describes the messages, the wait slots, cleanup and remastering.
#pragma once

#include <cstdint>

namespace pgrac::glue {

// Interconnect message types (one-way unless noted), in pgrac_ic's own range
// (below PGRAC_IC_FIRST_USER_TYPE), so they never collide with an upper layer's. Bodies are the GES
// wire format (src/ic/ges_wire.hpp); route_key = ges::route_key_for(resource), or the LMS worker
// index for resource-less messages (ReleaseAll, Replay). kMsgGesDeadlock carries the cluster-wide
// deadlock search: WaitHint and Edges to the coordinator's LMS 0 (route_key 0), EdgesRequest to LMS
// w (route_key w).
inline constexpr uint16_t kMsgGesClient = 16;    // backend -> its own node's LMS
inline constexpr uint16_t kMsgGesMaster = 17;    // client LMS -> master LMS
inline constexpr uint16_t kMsgGesReply = 18;     // master LMS -> client LMS (Grant/Bast/Deny)
inline constexpr uint16_t kMsgGesView = 19;      // RPC: one worker's lock table rows
inline constexpr uint16_t kMsgGesDeadlock = 20;  // deadlock search (docs/ges.md), see below
inline constexpr uint16_t kMsgBlockFetch = 32;   // RPC: Cache Fusion block batch

// Registers the GES handlers (from _PG_init).
void register_ges_handlers();
// Called once by LMS worker `worker_index` at start, before it serves: counts
// the start in shared memory and, if this worker ran before since the shared
// memory was created (a restart: its lock table and registry are gone),
// voids this node's locks in the worker's shard (their holders are told at
// their next GES call) and asks for a new epoch, in which every master
// rebuilds its table; the worker serves nothing until then. Never raises.
void lms_start(int worker_index);
// Called by the LMS worker loop before it drains its inbox, after every
// wake-up and at least every lms_tick_interval_ms() under a stream: membership
// changes and fencing, request deadlines, the reaper, deadlock rounds. Never
// raises.
void lms_tick(int worker_index);
// How long an idle LMS worker may sleep before lms_tick must run again.
long lms_tick_interval_ms();

}  // namespace pgrac::glue
