// Serving in place: the listener runs the handlers registered in place
// (handler_registry.hpp) on the requests that arrive for them, where they
// arrive, and sends the reply straight onto the wire. Two process wakeups
// fewer per RPC than the handoff to an LMS worker and back.
#pragma once

#include "ic/engine/engine.hpp"
#include "ic/shm/shared_state.hpp"

namespace pgrac::glue {

// Once, in the listener, before the first request.
void in_place_init(ic::Engine* engine);
// Serves what the engine holds for the listener (a bounded number, so that the
// wire keeps moving); a request that would wait goes to an LMS worker. True if
// anything was served. May raise a PostgreSQL error (the listener restarts).
bool serve_in_place(ic::IcShared* shm);

}  // namespace pgrac::glue
