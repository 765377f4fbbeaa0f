// The peer_timeout this instance told its peers, kept in the data directory
// so that the next instance started there keeps that exclusion window for a
// while (docs/ges.md, "The exclusion window"): an echo given under the old
// value may still count toward a peer's lease after a restart that lowered it.
#pragma once

#include <cstdint>

#include "ic/shm/shared_state.hpp"

namespace pgrac::glue {

// From the file (0: none or unreadable). Postmaster, when shared memory is made.
uint32_t told_timeout_from_file();
// Writes the largest window in force now (peer_timeout, or a kept older value)
// when it differs from what the file holds. Listener, at start and reload.
void remember_told_timeout(pgrac::ic::IcShared* shm);

}  // namespace pgrac::glue
