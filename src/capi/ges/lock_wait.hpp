// The waiting half of a global lock request, for lock_client.cpp: a
// backend's GES wait slot (src/instance/ges_shmem.hpp) and the one request it
// waits for: taking the slot for this session, arming it, waiting on the latch
// for the answer the local LMS delivers, and withdrawing the request (timeout,
// cancel, error). Also the backend's exit hook, which releases the session's
// locks. As PostgreSQL's lock.c hands only the sleeping to proc.c.
#pragma once

#include <cstdint>

#include "instance/ges_shmem.hpp"
#include "ic/ges/mode.hpp"
#include "ic/ges/resource.hpp"
#include "ic/ges/types.hpp"

namespace pgrac::glue {

// A lock request, as sent to the LMS and as withdrawn if it must be.
struct GesRequest {
    uint64_t id;
    pgrac::ic::ges::ResourceName resource;
    pgrac::ic::ges::LockMode mode;
    uint8_t flags;
    uint32_t timeout_ms;  // the master's wait limit (0: none)
    bool was_held;        // the session holds the resource in `prior` (a conversion)
    pgrac::ic::ges::LockMode prior;
    bool cached;  // a conversion of a lock taken from the node's cache (sent as Convert)
    pgrac::ic::ges::LockValue value;  // the value block a PW/EX down-conversion writes
};

// This backend's slot, taken for this session (ERROR if pgrac_ic is not
// preloaded); registers the exit hook the first time.
GesWaitSlot* ges_prepare();
// A new request id of this backend's slot and session.
// The id of this session's last request (0: none yet).
uint64_t ges_last_request_id();
uint64_t ges_next_request_id();
// Has this session sent a GES request (its locks need cleanup at exit)?
bool ges_session_used();
// Makes rq the pending request and arms the slot for it.
void ges_arm(GesWaitSlot* slot, const GesRequest& rq);
// The pending request is over (answered, or never queued): the slot goes idle.
void ges_disarm(GesWaitSlot* slot);
// The backend stops waiting (timeout, cancel, error): the request is
// withdrawn, and a grant that won the race is given back.
void ges_abandon(GesWaitSlot* slot, pgrac::ic::ges::DenyReason why);
// Waits on the latch until the armed slot leaves Waiting (*word: its value)
// or limit_ms (-1: no limit) passes (*timed_out; the request is withdrawn, and
// for NOWAIT (timeout_ms 0), where only a lost answer can take that long, an
// ERROR raised). Interrupts are honoured: the caller's PG_CATCH withdraws the
// request.
void ges_wait_answer(GesWaitSlot* slot, int timeout_ms, int64_t limit_ms, uint64_t* word,
                     bool* timed_out);

}  // namespace pgrac::glue
