// Putting a message into the outbound ring: used by backends (the C API) and
// by LMS workers (replies). Checks the destination and the per-peer queue
// limits, waits (honouring interrupts) or fails on a full queue, and wakes
// the listener.
#pragma once

#include <cstdint>

#include "ic/wire/frame.hpp"

namespace pgrac::glue {

// flags: frame flags (kFlagRpcRequest/Reply, kFlagControlLane).
// api_flags: PGRAC_IC_NOWAIT. timeout_ms < 0: wait for room without limit.
// Returns a pgrac_ic_status. May raise a PostgreSQL error on interrupt.
int enqueue_message(int node, uint16_t flags, const pgrac::ic::MessageHeader& mh, const void* body,
                    uint32_t len, int api_flags, int timeout_ms);

// Raises an ERROR in a handler the listener serves in place: it would wait for
// itself (a reply, a grant, room in a queue it drains). Called first by every
// C API entry point that sends or waits, before it changes any state.
void refuse_in_place();

// Is `node` a configured node (this one included)?
bool node_is_known(int node);

}  // namespace pgrac::glue
