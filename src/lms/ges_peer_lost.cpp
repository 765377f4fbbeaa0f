// The listener's half of GES cleanup: ListenerHost::on_peer_lost calls this.
// Counters rather than inbox messages: they cannot be lost to a full ring, and
// every LMS worker compares them with what it last saw on its next tick.
extern "C" {
#include "postgres.h"
}

#include "ges_shmem.hpp"
#include "ic/atomics.hpp"
#include "lms/ges_service.hpp"
#include "shmem.hpp"

namespace pgrac::glue {

void ges_note_peer_lost(uint16_t node_id) {
    GesShared* g = ges_shared();
    pgrac::ic::IcShared* shm = shared();
    if (g == nullptr || shm == nullptr || node_id < 1 || node_id > pgrac::ic::kMaxNodes) return;
    pgrac::ic::fetch_add(&g->lost_count[node_id - 1], 1u);
    for (uint32_t w = 0; w < shm->n_lms; w++)
        wake_procno(pgrac::ic::load_acquire(&shm->lms_procno[w]));
}

}  // namespace pgrac::glue
