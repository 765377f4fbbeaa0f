// GES wait slots: a small shared-memory area of its own (ShmemInitStruct
// "pgrac_ic ges"), one slot per PGPROC, through which an LMS worker hands a
// backend the outcome of its pending global lock request, plus per-node
// "lost" counters the listener bumps when a peer dies or restarts.
//
// Trivially copyable fields only, touched through ic/base/atomics.hpp.
//
// A slot's `word` packs (low 32 bits of request_id) << 32 | outcome:
//   outcome = kGesIdle (0) | kGesWaiting (1) | kGesGranted (2)
//           | kGesDenied (3) | reason << 8   (ges::DenyReason)
// The backend arms it (request_id, then word = id32 << 32 | Waiting); an LMS
// worker completes it by a compare-and-swap from exactly that value to
// Delivering, then writes the token and value, then publishes the outcome; a
// backend that gives up swaps Waiting back to Idle (and waits out a
// Delivering). Whoever swaps first wins, so a grant is never both delivered
// and abandoned, and nobody but the winner writes the token and value.
//
// A backend's request ids name its slot: bit 63 clear (the LMS's own ids have
// it set), bits 62..40 = pgprocno + 1, bits 39..32 = the slot's session tag
// (bumped whenever a new backend takes the slot), bits 31..0 a counter. So the
// LMS finds the slot of a reply without a scan (and checks pid and id there),
// and can tell whether the backend that sent a request still exists (the
// reaper of dead owners, src/lms/ges_service.cpp).
#pragma once

#include <cstdint>

#include "ic/base/node_list.hpp"
#include "ic/ges/node_cache.hpp"
#include "ic/ges/registry_mirror.hpp"
#include "ic/shm/shared_state.hpp"

namespace pgrac::glue {

inline constexpr uint32_t kGesIdle = 0;
inline constexpr uint32_t kGesWaiting = 1;
inline constexpr uint32_t kGesGranted = 2;
inline constexpr uint32_t kGesDenied = 3;
// An LMS won the slot and is writing the token and value: the outcome follows.
inline constexpr uint32_t kGesDelivering = 4;
// Direct routing (docs/ges.md, "Direct routing"): the LMS registered the
// backend's direct request in the epoch it was sent in, so the backend may
// complete the slot itself with the master's immediate grant (DirectReady ->
// Delivering -> SelfGranted, it writes the token and value in between); the
// LMS frees a SelfGranted slot (-> Idle) once its registry has the grant, and
// closes a DirectReady one (-> Waiting) at an epoch change.
inline constexpr uint32_t kGesDirectReady = 5;
inline constexpr uint32_t kGesSelfGranted = 6;

// Uses of cached locks one backend records in its slot (more: it takes the
// lock from the master instead).
inline constexpr int kGesSlotCachedUses = 32;

// Bits of the per-worker "mastered away from its home" hint (GesShared::moved).
inline constexpr uint32_t kGesMovedWords = 1024;

struct GesWaitSlot {
    uint64_t word;
    uint64_t request_id;  // full id of the armed request
    uint64_t token;       // fencing token of the grant, written before the word
    // The resource's lock value block with the grant (docs/ges.md, "Lock value
    // blocks"), written before the token.
    pgrac::ic::ges::LockValue value;
    int32_t pid;       // owner of the slot (0: unused)
    uint32_t session;  // bumped each time a new backend takes the slot
    // The backend's uses of the node's cached locks: generation << 32 |
    // (entry index + 1), 0 = none. Written by the backend only; the LMS reads
    // them for the cluster-wide deadlock search (who uses a cached lock).
    uint64_t cached_uses[kGesSlotCachedUses];
};

struct GesShared {
    uint32_t n_slots;
    uint32_t pad;
    // Bumped by a restarted LMS worker w: this node's locks in shard w are void
    // (its previous process took their client side with it).
    uint32_t shard_fences[pgrac::ic::kMaxLmsWorkers];
    // Counters for the view and the bench.
    uint64_t grants_delivered, denials_delivered, late_grants_undone;
    // Victims the cluster-wide deadlock search cancelled (coordinator side).
    uint64_t cluster_deadlocks;
    // Starts of each LMS worker since the shared memory was created: a start
    // after the first is a restart, which must rebuild the worker's shard.
    uint32_t lms_starts[pgrac::ic::kMaxLmsWorkers];
    // Owners whose locks the LMS reaper released (their backend was gone).
    uint64_t dead_owners_reaped;
    // GES messages refused: older epoch, from a node that is not a member or
    // not the resource's master, or naming an owner of another node.
    uint64_t stale_epoch_refused, wrong_source_refused;
    // Replayed grants that conflicted with an existing grant (must stay 0).
    uint64_t replay_conflicts;
    // Node-level caching (docs/ges.md): takes served from the cache (by the
    // backends, no message), takes that missed it by reason (CacheMiss), BASTs
    // received, locks kept in the cache, given back after a BAST, evicted
    // (or refreshed), and conversions that made a cached lock a backend's again.
    uint64_t cache_hits;
    uint64_t cache_misses[8];
    uint64_t basts_received, cache_transfers, cache_give_backs, cache_evictions, cache_conversions;
    // Lock value blocks this node's masters made invalid (a PW/EX holder gone,
    // a rebuild without a holder above CR).
    uint64_t value_invalidations;
    // Resources this node's masters handed to the node that used them most,
    // and hand-offs not acknowledged in time (each asked for a new epoch).
    uint64_t remasters, remaster_timeouts;
    // Direct routing: requests this node's backends sent on their requester
    // lanes, grants they took themselves, and, as a master, direct requests
    // served and those sent back to the requester's LMS (Redirect).
    uint64_t direct_sent, direct_taken, direct_served, direct_redirected;
    // Requests that waited in this node for a local user of a cached lock.
    uint64_t local_waits;
    // Per LMS worker, a bit per hash of the resources mastered away from their
    // home in the worker's epoch (set by the worker, cleared at its epoch
    // start): a backend sends no direct request for one (a hint only).
    uint64_t moved[pgrac::ic::kMaxLmsWorkers][kGesMovedWords];
    GesWaitSlot slots[1];  // n_slots of them
};
// Plain data only, as everything in shared memory (pg_boundary.hpp).
static_assert(pgrac::ic::kShareable<GesWaitSlot> && pgrac::ic::kShareable<GesShared>);

inline uint64_t ges_slot_word(uint64_t request_id, uint32_t outcome) {
    return (request_id << 32) | outcome;
}

inline constexpr uint64_t kGesInternalId = uint64_t{1} << 63;

// The high 32 bits of a backend's request ids (see above).
inline uint64_t ges_request_id_base(uint32_t procno, uint32_t session) {
    return (static_cast<uint64_t>((procno + 1) & 0x7fffffu) << 40) |
           (static_cast<uint64_t>(session & 0xffu) << 32);
}
// The slot index and session tag a request id names; false for an LMS id.
inline bool ges_request_id_slot(uint64_t id, uint32_t* procno, uint32_t* session) {
    if (id & kGesInternalId) return false;
    const uint32_t p = static_cast<uint32_t>(id >> 40) & 0x7fffffu;
    if (p == 0) return false;
    *procno = p - 1;
    *session = static_cast<uint32_t>(id >> 32) & 0xffu;
    return true;
}

// The node's lock cache (ic/ges/node_cache.hpp): nullptr when
// cluster.ges_cache_entries is 0 or the library is not preloaded. Each
// partition's lock is ges_cache_lock(partition) (an LWLock of our tranche).
pgrac::ic::ges::NodeCache* ges_node_cache();
void ges_cache_lock(uint32_t partition);
void ges_cache_unlock(uint32_t partition);

// The pids of the backends that record a use of cache entry `entry` of
// generation `generation` (lock-free reads of every slot).
int ges_cache_users(uint32_t entry, uint32_t generation, int32_t* pids, int max);

// Chains the shmem hooks (one call from _PG_init).
void install_ges_shmem();
// nullptr if not preloaded.
GesShared* ges_shared();
// Worker w's registry mirror (this node's locks and requests in its shard,
// kept so that a restarted worker gets them back): one for each of
// cluster.lms_workers, of cluster.ges_registry_entries entries, in the same
// shared-memory area (empty if not preloaded or w is no worker's index).
pgrac::ic::ges::RegistryMirror ges_registry_mirror(uint32_t worker);
// This backend's slot (by MyProc->pgprocno); nullptr without MyProc.
GesWaitSlot* ges_my_slot();
// Completes the slot of backend `pid` if it is still waiting for request_id.
// outcome: kGesGranted or kGesDenied | reason << 8. True if delivered (and
// the backend's latch set).
// token: the grant's fencing token (0 for a denial); value: the grant's value
// block (nullptr for a denial).
bool ges_deliver(int32_t pid, uint64_t request_id, uint32_t outcome, uint64_t token = 0,
                 const pgrac::ic::ges::LockValue* value = nullptr);
// Direct routing: opens the slot of backend `pid`, if it still waits for
// request_id, for its own completion (Waiting -> DirectReady); true if so.
bool ges_mark_direct(int32_t pid, uint64_t request_id);
// Settles a direct request's slot at an epoch change: closes it if still open
// (false), or, if the backend completed it itself, frees it and returns true
// with the grant's token and value.
bool ges_settle_direct(int32_t pid, uint64_t request_id, uint64_t* token,
                       pgrac::ic::ges::LockValue* value);
// Whether backend pid's slot is armed for request_id and still waits (Waiting
// or DirectReady).
bool ges_slot_waits(int32_t pid, uint64_t request_id);
// The "mastered away from its home" hint of resource r (route_key_for(r)) in
// LMS worker w's shard: set, test, and clear the worker's bits.
void ges_note_moved(uint32_t worker, uint32_t route_key);
bool ges_maybe_moved(uint32_t worker, uint32_t route_key);
void ges_clear_moved(uint32_t worker);
// Whether the backend that sent request_id (pid) still has its GES session: its
// slot still belongs to pid with the same session tag. For an id that names no
// slot, whether any slot belongs to pid. Lock-free reads only.
bool ges_owner_alive(int32_t pid, uint64_t request_id);

}  // namespace pgrac::glue
