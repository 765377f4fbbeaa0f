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
// Recovery of a restarted LMS worker w (docs/ges.md, "LMS restart"): it sends
// kMsgGesRecover (empty body, route_key w) to LMS w of every other live node;
// each answers with a Replay to it (kMsgGesMaster: its registry's locks that
// the restarted worker masters, last-batch marker included) and with
// kMsgGesRestore (Replay-encoded: its table's locks owned by the restarted
// worker's node, which rebuild that worker's client registry).
inline constexpr uint16_t kMsgGesRecover = 21;
inline constexpr uint16_t kMsgGesRestore = 22;
inline constexpr uint16_t kMsgBlockFetch = 32;  // RPC: Cache Fusion block batch

// Registers the GES handlers (from _PG_init).
void register_ges_handlers();
// Called once by LMS worker `worker_index` at start, before it serves: counts
// the start in shared memory and, if this worker ran before since the shared
// memory was created (a restart: its lock table and registry are gone),
// starts rebuilding its shard (replaying until every live node has answered
// or the barrier times out). Never raises.
void lms_start(int worker_index);
// Called by the LMS worker loop before it drains its inbox and after every
// wake-up: membership changes (remastering), request deadlines, the replay
// barrier's timeout. Never raises.
void lms_tick(int worker_index);
// How long an idle LMS worker may sleep before lms_tick must run again.
long lms_tick_interval_ms();

// Listener side (src/lms/ges_peer_lost.cpp): node `node_id` was lost (DOWN or
// restarted): bump its lost counter and wake every LMS worker.
void ges_note_peer_lost(uint16_t node_id);

}  // namespace pgrac::glue
