// Session-level global locks (as pg_advisory_lock): what the C API
// (src/capi/ges/api.cpp) and the SQL functions (src/views/ges_functions.cpp)
// call. A request goes to this node's LMS worker for the resource, which
// records it and forwards it to the master; the answer comes back through
// this backend's GES wait slot and its latch (src/capi/ges/wait.hpp).
#pragma once

#include <cstdint>

#include "ic/ges/mode.hpp"
#include "ic/ges/resource.hpp"

namespace pgrac::glue {

// Takes (or converts to) `mode`. true: granted; false: not granted within
// timeout_ms (0: NOWAIT, -1: no limit). Errors for deadlock victims and
// failures.
bool ges_lock(const pgrac::ic::ges::ResourceName& r, pgrac::ic::ges::LockMode mode, int timeout_ms);
// Releases one level; false (and a WARNING) if the session does not hold r.
bool ges_unlock(const pgrac::ic::ges::ResourceName& r);
// Releases every global lock of this session; returns how many resources.
int ges_unlock_all();
// Does the session hold r? If so, *token is its grant's fencing token.
bool ges_held_token(const pgrac::ic::ges::ResourceName& r, uint64_t* token);

}  // namespace pgrac::glue
