// Interconnect statuses (pgrac_ic_status) as text, pgrac_ic_strerror(), and as the
// PostgreSQL errors that report them to SQL callers and to the C API's lock and
// block functions.
#pragma once

#include <cstdint>

#include "ic/shm/shared_state.hpp"

namespace pgrac::glue {

// The shared region; ERROR (with what to do) if pgrac_ic was not preloaded.
pgrac::ic::IcShared* require_shared();
// ERROR unless `node` is in cluster.nodes.
void require_known_node(int node);
// Raises the ERROR that matches a failed pgrac_ic status; never returns.
// For HANDLER_ERROR the reply holds the remote error text.
[[noreturn]] void raise_status(int status, int node, const char* what, const void* reply,
                               uint32_t reply_len);

}  // namespace pgrac::glue
