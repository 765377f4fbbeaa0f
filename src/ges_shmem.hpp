// GES wait slots: a small shared-memory area of its own (ShmemInitStruct
// "pgrac_ic ges"), one slot per PGPROC, through which an LMS worker hands a
// backend the outcome of its pending global lock request, plus per-node
// "lost" counters the listener bumps when a peer dies or restarts.
//
// Trivially copyable fields only, touched through ic/atomics.hpp.
//
// A slot's `word` packs (low 32 bits of request_id) << 32 | outcome:
//   outcome = kGesIdle (0) | kGesWaiting (1) | kGesGranted (2)
//           | kGesDenied (3) | reason << 8   (ges::DenyReason)
// The backend arms it (request_id, then word = id32 << 32 | Waiting); an LMS
// worker completes it with one compare-and-swap from exactly that value; a
// backend that gives up swaps it back to Idle. Whoever swaps first wins, so a
// grant is never both delivered and abandoned.
#pragma once

#include <cstdint>

#include "ic/node_list.hpp"

namespace pgrac::glue {

inline constexpr uint32_t kGesIdle = 0;
inline constexpr uint32_t kGesWaiting = 1;
inline constexpr uint32_t kGesGranted = 2;
inline constexpr uint32_t kGesDenied = 3;

struct GesWaitSlot {
    uint64_t word;
    uint64_t request_id;  // full id of the armed request
    int32_t pid;          // owner of the slot (0: unused)
    uint32_t pad;
};

struct GesShared {
    uint32_t n_slots;
    uint32_t pad;
    // Bumped by the listener (ListenerHost::on_peer_lost) for node id i+1.
    uint32_t lost_count[pgrac::ic::kMaxNodes];
    // Counters for the view and the bench.
    uint64_t grants_delivered, denials_delivered, late_grants_undone;
    GesWaitSlot slots[1];  // n_slots of them
};

inline uint64_t ges_slot_word(uint64_t request_id, uint32_t outcome) {
    return (request_id << 32) | outcome;
}

// Chains the shmem hooks (one call from _PG_init).
void install_ges_shmem();
// nullptr if not preloaded.
GesShared* ges_shared();
// This backend's slot (by MyProc->pgprocno); nullptr without MyProc.
GesWaitSlot* ges_my_slot();
// Completes the slot of backend `pid` if it is still waiting for request_id.
// outcome: kGesGranted or kGesDenied | reason << 8. True if delivered (and
// the backend's latch set).
bool ges_deliver(int32_t pid, uint64_t request_id, uint32_t outcome);

}  // namespace pgrac::glue
