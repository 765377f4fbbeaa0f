// The GES glue in the LMS workers (src/lms/ges_service.cpp): each worker
// masters its shard of resources (route_key % n_lms) in a ges::LockTable and
// keeps this node's client side of the same shard in a ges::ClientRegistry.
// docs/ges.md describes the messages, the wait slots, cleanup and remastering.
#pragma once

#include <cstdint>

#include "ic/wire/message_types.hpp"

namespace pgrac::glue {

// The message types (ic/wire/message_types.hpp), under the names the LMS code uses.
using ic::kMsgBlockFetch;
using ic::kMsgGesClient;
using ic::kMsgGesDeadlock;
using ic::kMsgGesDirect;
using ic::kMsgGesMaster;
using ic::kMsgGesReply;
using ic::kMsgGesView;

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
