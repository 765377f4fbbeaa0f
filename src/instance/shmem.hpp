// The interconnect's shared memory as the glue sees it.
#pragma once

#include "ic/shm/shared_state.hpp"

namespace pgrac::glue {

// Registers the shared-memory hooks (from _PG_init).
void install_shmem_hooks();
// This process's view of the region; nullptr if pgrac_ic was not preloaded.
pgrac::ic::IcShared* shared();
// The configured nodes, parsed once per process (self included; a
// single-node list when cluster.nodes is empty).
const std::vector<pgrac::ic::NodeAddress>& configured_nodes();
// Wakes a process by PGPROC number (sets its latch).
void wake_procno(int procno);

}  // namespace pgrac::glue
