// The GES wait-slot area (see ges_shmem.hpp).
extern "C" {
#include "postgres.h"

#include "access/twophase.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
}

#include <cstddef>
#include <cstring>

#include "instance/ges_shmem.hpp"
#include "instance/guc.hpp"
#include "ic/base/atomics.hpp"

namespace pgrac::glue {

namespace {

shmem_request_hook_type prev_request = nullptr;
shmem_startup_hook_type prev_startup = nullptr;
GesShared* g_ges = nullptr;

uint32_t slot_count() {
    return static_cast<uint32_t>(MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts);
}

size_t slots_size() {
    return MAXALIGN(offsetof(GesShared, slots) + sizeof(GesWaitSlot) * slot_count());
}

size_t mirror_size() {
    return MAXALIGN(pgrac::ic::ges::RegistryMirror::bytes_for(
        static_cast<uint32_t>(pgrac_ges_registry_entries)));
}

pgrac::ic::ges::NodeCache g_cache;
LWLockPadded* g_cache_locks = nullptr;
constexpr const char* kCacheTranche = "pgrac_ic_ges_cache";

uint32_t cache_entries_per_worker() {
    return static_cast<uint32_t>(pgrac_ges_cache_entries) /
           static_cast<uint32_t>(pgrac_lms_workers);
}

size_t cache_size() {
    if (pgrac_ges_cache_entries <= 0) return 0;
    return MAXALIGN(pgrac::ic::ges::NodeCache::bytes_for(static_cast<uint32_t>(pgrac_lms_workers),
                                                         cache_entries_per_worker()));
}

int cache_lock_count() {
    return pgrac_lms_workers * static_cast<int>(pgrac::ic::ges::kCachePartsPerWorker);
}

// Wait slots, then one registry mirror per LMS worker, then the lock cache
// (cluster.lms_workers, cluster.ges_registry_entries and
// cluster.ges_cache_entries are fixed at postmaster start).
size_t ges_size() {
    return slots_size() + mirror_size() * static_cast<size_t>(pgrac_lms_workers) + cache_size();
}

void request() {
    if (prev_request) prev_request();
    RequestAddinShmemSpace(ges_size());
    if (cache_size() > 0) RequestNamedLWLockTranche(kCacheTranche, cache_lock_count());
}

void startup() {
    if (prev_startup) prev_startup();
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    bool found = false;
    void* region = ShmemInitStruct("pgrac_ic ges", ges_size(), &found);
    if (!found) {
        std::memset(region, 0, ges_size());
        static_cast<GesShared*>(region)->n_slots = slot_count();
        for (int w = 0; w < pgrac_lms_workers; w++)
            pgrac::ic::ges::RegistryMirror::create(
                static_cast<char*>(region) + slots_size() + mirror_size() * w,
                static_cast<uint32_t>(pgrac_ges_registry_entries));
        if (cache_size() > 0)
            pgrac::ic::ges::NodeCache::format(
                static_cast<char*>(region) + slots_size() + mirror_size() * pgrac_lms_workers,
                static_cast<uint32_t>(pgrac_lms_workers), cache_entries_per_worker());
    }
    g_ges = static_cast<GesShared*>(region);
    if (cache_size() > 0) {
        g_cache = pgrac::ic::ges::NodeCache::attach(static_cast<char*>(region) + slots_size() +
                                                    mirror_size() * pgrac_lms_workers);
        g_cache_locks = GetNamedLWLockTranche(kCacheTranche);
    }
    LWLockRelease(AddinShmemInitLock);
}

}  // namespace

void install_ges_shmem() {
    prev_request = shmem_request_hook;
    shmem_request_hook = request;
    prev_startup = shmem_startup_hook;
    shmem_startup_hook = startup;
}

GesShared* ges_shared() {
    return g_ges;
}

pgrac::ic::ges::NodeCache* ges_node_cache() {
    return g_cache.enabled() && g_cache_locks != nullptr ? &g_cache : nullptr;
}

void ges_cache_lock(uint32_t partition) {
    LWLockAcquire(&g_cache_locks[partition].lock, LW_EXCLUSIVE);
}

void ges_cache_unlock(uint32_t partition) {
    LWLockRelease(&g_cache_locks[partition].lock);
}

pgrac::ic::ges::RegistryMirror ges_registry_mirror(uint32_t worker) {
    if (g_ges == nullptr || worker >= static_cast<uint32_t>(pgrac_lms_workers)) return {};
    return pgrac::ic::ges::RegistryMirror::attach(reinterpret_cast<char*>(g_ges) + slots_size() +
                                                  mirror_size() * worker);
}

GesWaitSlot* ges_my_slot() {
    if (g_ges == nullptr || MyProc == nullptr) return nullptr;
    const uint32_t i = static_cast<uint32_t>(MyProc->pgprocno);
    return i < g_ges->n_slots ? &g_ges->slots[i] : nullptr;
}

namespace {

// The slot of backend pid's request request_id, or nullptr if it is no
// longer that backend's or armed for another request.
GesWaitSlot* slot_of(int32_t pid, uint64_t request_id) {
    uint32_t i, session;
    if (g_ges == nullptr || pid <= 0 || !ges_request_id_slot(request_id, &i, &session) ||
        i >= g_ges->n_slots)
        return nullptr;
    GesWaitSlot* s = &g_ges->slots[i];
    if (pgrac::ic::load_acquire(&s->pid) != pid ||
        pgrac::ic::load_acquire(&s->request_id) != request_id)
        return nullptr;
    return s;
}

}  // namespace

bool ges_deliver(int32_t pid, uint64_t request_id, uint32_t outcome, uint64_t token,
                 const pgrac::ic::ges::LockValue* value) {
    GesWaitSlot* s = slot_of(pid, request_id);
    if (s == nullptr) return false;
    const uint32_t i = static_cast<uint32_t>(s - g_ges->slots);
    // Win the slot first (Waiting or DirectReady -> Delivering), then write
    // the token and value, then publish the outcome: a loser (a stale request
    // id, an abandoned wait) writes nothing, and the waiter reads them only
    // after the word says the outcome (release store).
    uint64_t expected = ges_slot_word(request_id, kGesWaiting);
    bool won =
        pgrac::ic::compare_exchange(&s->word, &expected, ges_slot_word(request_id, kGesDelivering));
    if (!won && expected == ges_slot_word(request_id, kGesDirectReady))
        won = pgrac::ic::compare_exchange(&s->word, &expected,
                                          ges_slot_word(request_id, kGesDelivering));
    if (!won) {
        // The backend took this grant itself (direct routing) and the
        // registry has it now: the slot is free for the backend's next request.
        if ((outcome & 0xff) == kGesGranted &&
            expected == ges_slot_word(request_id, kGesSelfGranted) &&
            pgrac::ic::compare_exchange(&s->word, &expected, uint64_t{0})) {
            SetLatch(&ProcGlobal->allProcs[i].procLatch);
            return true;
        }
        return false;
    }
    s->value = value != nullptr ? *value : pgrac::ic::ges::LockValue{};
    pgrac::ic::store_release(&s->token, token);
    // (The slot may have been reset meanwhile: its backend exited.)
    expected = ges_slot_word(request_id, kGesDelivering);
    if (!pgrac::ic::compare_exchange(&s->word, &expected, ges_slot_word(request_id, outcome)))
        return false;
    pgrac::ic::count((outcome & 0xff) == kGesGranted ? &g_ges->grants_delivered
                                                     : &g_ges->denials_delivered);
    SetLatch(&ProcGlobal->allProcs[i].procLatch);
    return true;
}

bool ges_mark_direct(int32_t pid, uint64_t request_id) {
    GesWaitSlot* s = slot_of(pid, request_id);
    if (s == nullptr) return false;
    uint64_t expected = ges_slot_word(request_id, kGesWaiting);
    return pgrac::ic::compare_exchange(&s->word, &expected,
                                       ges_slot_word(request_id, kGesDirectReady));
}

bool ges_slot_waits(int32_t pid, uint64_t request_id) {
    GesWaitSlot* s = slot_of(pid, request_id);
    if (s == nullptr) return false;
    const uint64_t w = pgrac::ic::load_acquire(&s->word);
    return w == ges_slot_word(request_id, kGesWaiting) ||
           w == ges_slot_word(request_id, kGesDirectReady);
}

bool ges_settle_direct(int32_t pid, uint64_t request_id, uint64_t* token,
                       pgrac::ic::ges::LockValue* value) {
    GesWaitSlot* s = slot_of(pid, request_id);
    if (s == nullptr) return false;
    for (;;) {
        uint64_t w = pgrac::ic::load_acquire(&s->word);
        if (w == ges_slot_word(request_id, kGesDelivering)) {  // the backend is writing
            pg_spin_delay();
            continue;
        }
        if (w == ges_slot_word(request_id, kGesDirectReady)) {
            if (pgrac::ic::compare_exchange(&s->word, &w, ges_slot_word(request_id, kGesWaiting)))
                return false;
            continue;  // the backend moved first
        }
        if (w != ges_slot_word(request_id, kGesSelfGranted)) return false;
        *value = s->value;
        *token = pgrac::ic::load_acquire(&s->token);
        if (pgrac::ic::compare_exchange(&s->word, &w, uint64_t{0})) {
            SetLatch(&ProcGlobal->allProcs[s - g_ges->slots].procLatch);
            return true;
        }
        // Reset under us: its backend exited (nothing to take over).
        return false;
    }
}

namespace {

// A bit of worker w's hint for a route key (the key's low bits pick the
// worker, so they are mixed in first).
uint32_t moved_bit(uint32_t route_key) {
    return (route_key * 0x9E3779B1u >> 8) % (kGesMovedWords * 64);
}

}  // namespace

void ges_note_moved(uint32_t worker, uint32_t route_key) {
    if (g_ges == nullptr || worker >= pgrac::ic::kMaxLmsWorkers) return;
    const uint32_t b = moved_bit(route_key);
    __atomic_fetch_or(&g_ges->moved[worker][b / 64], uint64_t{1} << (b % 64), __ATOMIC_RELAXED);
}

bool ges_maybe_moved(uint32_t worker, uint32_t route_key) {
    if (g_ges == nullptr || worker >= pgrac::ic::kMaxLmsWorkers) return false;
    const uint32_t b = moved_bit(route_key);
    return (pgrac::ic::load_relaxed(&g_ges->moved[worker][b / 64]) >> (b % 64)) & 1;
}

void ges_clear_moved(uint32_t worker) {
    if (g_ges == nullptr || worker >= pgrac::ic::kMaxLmsWorkers) return;
    for (uint32_t i = 0; i < kGesMovedWords; i++)
        pgrac::ic::store_release(&g_ges->moved[worker][i], uint64_t{0});
}

int ges_cache_users(uint32_t entry, uint32_t generation, int32_t* pids, int max) {
    if (g_ges == nullptr) return 0;
    const uint64_t want = (static_cast<uint64_t>(generation) << 32) | (entry + 1);
    int n = 0;
    for (uint32_t i = 0; i < g_ges->n_slots && n < max; i++) {
        const GesWaitSlot* s = &g_ges->slots[i];
        const int32_t pid = pgrac::ic::load_acquire(&s->pid);
        if (pid <= 0) continue;
        for (int k = 0; k < kGesSlotCachedUses; k++)
            if (pgrac::ic::load_acquire(&s->cached_uses[k]) == want) {
                pids[n++] = pid;
                break;
            }
    }
    return n;
}

bool ges_owner_alive(int32_t pid, uint64_t request_id) {
    if (g_ges == nullptr || pid <= 0) return true;
    uint32_t i, session;
    if (ges_request_id_slot(request_id, &i, &session) && i < g_ges->n_slots) {
        const GesWaitSlot* s = &g_ges->slots[i];
        return pgrac::ic::load_acquire(&s->pid) == pid &&
               (pgrac::ic::load_acquire(&s->session) & 0xffu) == session;
    }
    for (uint32_t k = 0; k < g_ges->n_slots; k++)
        if (pgrac::ic::load_acquire(&g_ges->slots[k].pid) == pid) return true;
    return false;
}

}  // namespace pgrac::glue
