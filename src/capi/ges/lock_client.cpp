// The backend's side of a global lock (lock_client.hpp), top to bottom: names
// and modes, the session's held table, the send to this node's LMS, then
// ges_lock / ges_unlock / ges_unlock_all. Everything here may raise a
// PostgreSQL error and holds only trivially destructible locals; the one
// piece of C++ that allocates (the GES wire encoding, a std::vector) runs in
// encode_msg() under guarded().
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
}

#include <sched.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "capi/errors.hpp"
#include "capi/ges/lock_client.hpp"
#include "capi/ges/lock_wait.hpp"
#include "capi/requester_path.hpp"
#include "ic/base/atomics.hpp"
#include "ic/ges/node_cache.hpp"
#include "ic/ges/wire.hpp"
#include "ic/wire/message_types.hpp"
#include "instance/ges_shmem.hpp"
#include "instance/guc.hpp"
#include "instance/pg_boundary.hpp"
#include "instance/shmem.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;

namespace pgrac::glue {

// ---- names and modes, checked

ResourceName ges_text_resource(const char* p, int len) {
    ResourceName r;
    if (len < 1 || len > static_cast<int>(kMaxResourceText) || memchr(p, 0, len) != nullptr)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("global lock resource names are 1 to %d bytes",
                               static_cast<int>(kMaxResourceText))));
    r.kind = ResourceKind::Text;
    r.len = static_cast<uint8_t>(len);
    memset(r.data, 0, sizeof r.data);
    memcpy(r.data, p, len);
    return r;
}

ResourceName ges_api_resource(const char* resource) {
    if (resource == nullptr)
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                        errmsg("global lock resource name must not be NULL")));
    return ges_text_resource(resource, static_cast<int>(strnlen(resource, 4096)));
}

LockMode ges_api_mode(pgrac_ges_mode mode) {
    if (static_cast<int>(mode) < 0 || static_cast<int>(mode) >= kLockModeCount)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("invalid global lock mode %d", static_cast<int>(mode))));
    return static_cast<LockMode>(mode);
}

void ges_resource_text(const ResourceName& r, char* out, size_t cap) {
    if (r.is_text())
        snprintf(out, cap, "%.*s", static_cast<int>(r.len), reinterpret_cast<const char*>(r.data));
    else
        snprintf(out, cap, "#%lld", static_cast<long long>(r.int_value()));
}

// ---- the send: one GES message to this node's LMS worker for the resource

namespace {

constexpr int kEncodeMax = 256;

Owner my_owner() {
    return Owner{static_cast<uint16_t>(pgrac_node_id), static_cast<uint32_t>(MyProcPid)};
}

// Encodes one GES message into out (kEncodeMax bytes); returns its length,
// 0 on failure (message in err).
size_t encode_msg(GesMsgType type, const ResourceName* r, LockMode mode, uint64_t request_id,
                  uint8_t flags, uint32_t timeout_ms, DenyReason reason, const LockValue* value,
                  uint32_t epoch, uint8_t* out, char* err, size_t errlen) {
    size_t n = 0;
    const bool ok = guarded(
        [&] {
            GesMessage m;
            m.type = type;
            m.epoch = epoch;
            m.owner = my_owner();
            if (r) m.resource = *r;
            m.mode = mode;
            m.request_id = request_id;
            m.flags = flags;
            m.timeout_ms = timeout_ms;
            m.reason = reason;
            if (value != nullptr) m.value = *value;
            std::vector<uint8_t> body;
            const GesWireError e = encode_ges_message(m, &body);
            if (e != GesWireError::None || body.size() > kEncodeMax)
                throw std::runtime_error(std::string("cannot encode GES message: ") +
                                         ges_wire_error_name(e));
            std::memcpy(out, body.data(), body.size());
            n = body.size();
        },
        err, errlen);
    return ok ? n : 0;
}

}  // namespace

uint32_t ges_shard_of(const ResourceName& r) {
    pgrac::ic::IcShared* shm = shared();
    return shm && shm->n_lms ? worker_for(r, shm->n_lms) : 0;
}

int ges_send_client(GesMsgType type, const ResourceName* r, uint32_t route_key, LockMode mode,
                    uint64_t request_id, uint8_t flags, uint32_t timeout_ms, DenyReason reason,
                    int wait_ms, const LockValue* value, uint32_t epoch) {
    uint8_t body[kEncodeMax];
    char err[256];
    const size_t n = encode_msg(type, r, mode, request_id, flags, timeout_ms, reason, value, epoch,
                                body, err, sizeof err);
    if (n == 0) ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("pgrac_ic: %s", err)));
    return pgrac_ic_send(pgrac_node_id, ic::kMsgGesClient, route_key, body,
                         static_cast<uint32_t>(n), PGRAC_IC_CONTROL, wait_ms);
}

int ges_send_release_all(int wait_ms) {
    int first = PGRAC_IC_OK;
    pgrac::ic::IcShared* shm = shared();
    for (uint32_t w = 0; shm && w < shm->n_lms; w++) {
        // Bounded by this session's last request: a direct request after it
        // may reach a master first, and its lock is not this release's.
        const int rc = ges_send_client(GesMsgType::ReleaseAll, nullptr, w, LockMode::NL,
                                       ges_last_request_id(), 0, 0, DenyReason::Cancelled, wait_ms);
        if (rc != PGRAC_IC_OK && first == PGRAC_IC_OK) first = rc;
    }
    return first;
}

// ---- the session's held table

namespace {

constexpr int kGesMaxHeld = 1024;

// One global lock of this session. A grant is valid under the node's fence
// count and its shard's (LMS restart) fence count at the time of the grant; if
// either moved since, the lock is void (docs/ges.md, "Fencing").
struct GesHeld {
    ResourceName resource;
    LockMode mode;
    int64_t count;
    uint32_t fences;
    uint32_t shard_fences;
    uint64_t token;  // fencing token of the grant
    // Taken from the node's cache (docs/ges.md, "Node-level caching"): a use
    // of cache entry `entry` while its generation is `generation`; the master
    // knows only the node's lock. Not cached: the session's own lock.
    bool cached;
    uint32_t entry;
    uint32_t generation;
    // The lock value block (docs/ges.md, "Lock value blocks"): as the grant
    // or the take brought it, or as the session set it since (dirty: to be
    // written when a PW/EX lock is released or converted down).
    LockValue value;
    bool value_dirty;
    // A down-conversion of this cached hold that the session stopped waiting
    // for: if the LMS made the lock the session's own to convert it (the
    // entry is gone), it is made at the master, and the session holds this.
    bool has_pending_down;
    LockMode pending_down;
};

// The value a PW/EX hold writes when it is released or converted to `to`
// (NL: released), or nullptr when it writes nothing (not dirty, not PW/EX,
// or PW converting up to EX).
const LockValue* value_to_write(const GesHeld& h, LockMode to) {
    if (!h.value_dirty || !mode_writes_value(h.mode)) return nullptr;
    if (h.mode == LockMode::PW && to == LockMode::EX) return nullptr;
    return &h.value;
}

GesHeld g_held[kGesMaxHeld];
int g_nheld = 0;

// This node's fence count now (a lapsed lease is marked fenced first).
uint32_t node_fences() {
    IcShared* shm = shared();
    (void)fence_if_lapsed(&shm->membership, lease_now_ms(&shm->membership));
    return lease_fences(lease_word(&shm->membership));
}

uint32_t shard_fences(const ResourceName& r) {
    GesShared* g = ges_shared();
    return g ? load_acquire(&g->shard_fences[ges_shard_of(r)]) : 0;
}

GesHeld* ges_find_held(const ResourceName& r) {
    for (int i = 0; i < g_nheld; i++)
        if (g_held[i].resource == r) return &g_held[i];
    return nullptr;
}

void ges_add_held(const GesHeld& h) {
    g_held[g_nheld++] = h;
}

void ges_drop_held(GesHeld* h) {
    *h = g_held[g_nheld - 1];
    g_nheld--;
}

int ges_held_count() {
    return g_nheld;
}

void ges_void_lost_locks(uint32_t f);
void ges_void_lost_locks() {
    if (g_nheld != 0 && shared() != nullptr) ges_void_lost_locks(node_fences());
}

// ---- the node's lock cache (ic/ges/node_cache.hpp)

void count_miss(CacheMiss why) {
    GesShared* g = ges_shared();
    if (g != nullptr) pgrac::ic::count(&g->cache_misses[static_cast<int>(why)]);
}

// This session's record of its cached uses, in its wait slot (for the
// cluster-wide deadlock search: who uses a cached lock).
uint64_t use_word(uint32_t entry, uint32_t generation) {
    return (static_cast<uint64_t>(generation) << 32) | (entry + 1);
}

int free_use_record() {
    GesWaitSlot* slot = ges_my_slot();
    if (slot == nullptr) return -1;
    for (int k = 0; k < kGesSlotCachedUses; k++)
        if (load_relaxed(&slot->cached_uses[k]) == 0) return k;
    return -1;
}

void forget_use_record(uint32_t entry, uint32_t generation) {
    GesWaitSlot* slot = ges_my_slot();
    if (slot == nullptr) return;
    const uint64_t w = use_word(entry, generation);
    for (int k = 0; k < kGesSlotCachedUses; k++)
        if (load_relaxed(&slot->cached_uses[k]) == w)
            store_release(&slot->cached_uses[k], uint64_t{0});
}

// Takes `mode` of r from the node's cache for this session (prior: the mode
// it uses already, NL for a new take). True if taken (*token and, for a new
// take, *entry and *generation set).
// A conversion by a PW/EX user writes `write` (nullptr: nothing) into the
// entry; *value gets the entry's value block after it.
bool cache_take_local(const ResourceName& r, LockMode mode, LockMode prior, uint32_t fences,
                      uint32_t shard, uint64_t* token, uint32_t* entry, uint32_t* generation,
                      const LockValue* write, LockValue* value, CacheMiss* miss = nullptr) {
    NodeCache* c = ges_node_cache();
    if (c == nullptr) return false;
    // A new use needs a record (else the lock comes from the master).
    const int record = prior == LockMode::NL ? free_use_record() : -2;
    if (record == -1) return false;
    const uint32_t part = c->partition_of(r, ges_shard_of(r));
    CacheMiss why = CacheMiss::NotCached;
    ges_cache_lock(part);
    CacheEntry* e = c->find(part, r);
    if (e != nullptr) why = cache_take(*e, mode, prior, fences, shard, token);
    if (why == CacheMiss::None) {
        *entry = c->index_of(e);
        *generation = e->generation;
        if (write != nullptr) e->value = *write;
        *value = e->value;
        // Recorded before the partition lock is let go: the LMS reads
        // records only for entries a BAST marked, which it does under it.
        if (record >= 0)
            store_release(&ges_my_slot()->cached_uses[record], use_word(*entry, *generation));
    }
    ges_cache_unlock(part);
    if (miss != nullptr) *miss = why;
    if (why != CacheMiss::None) {
        count_miss(why);
        return false;
    }
    GesShared* g = ges_shared();
    if (g != nullptr) pgrac::ic::count(&g->cache_hits);
    return true;
}

// The cache entry of a cached hold, if it is still the one the hold uses
// (caller holds the partition lock).
CacheEntry* held_entry(NodeCache* c, const GesHeld& h) {
    CacheEntry* e = c->at(h.entry);
    return e != nullptr && e->state == kCacheCached && e->generation == h.generation &&
                   e->resource == h.resource
               ? e
               : nullptr;
}

uint32_t partition_of_held(NodeCache* c, const GesHeld& h) {
    return c->partition_of(h.resource, ges_shard_of(h.resource));
}

// A cached hold whose entry is gone while the fences stayed: the LMS made it
// the session's own lock (a conversion the cache could not make).
void settle_hold(GesHeld* h) {
    NodeCache* c = ges_node_cache();
    if (!h->cached || c == nullptr) return;
    const uint32_t part = partition_of_held(c, *h);
    ges_cache_lock(part);
    const bool same = held_entry(c, *h) != nullptr;
    ges_cache_unlock(part);
    if (!same) {
        h->cached = false;
        forget_use_record(h->entry, h->generation);
        if (h->has_pending_down) {
            h->mode = h->pending_down;
            h->value_dirty = false;  // the Convert carried the write
        }
    }
    h->has_pending_down = false;
}

// Ends this session's use of a cached hold; tells the LMS if a BAST or a
// local conversion waits on the entry. False if the entry is no longer the
// hold's (fenced, or the LMS made the lock the session's own). A PW/EX use
// writes `write` into the entry (nullptr: nothing).
bool drop_cached_use(const GesHeld& h, int wait_ms, const LockValue* write = nullptr) {
    NodeCache* c = ges_node_cache();
    if (c == nullptr) return false;
    const uint32_t part = partition_of_held(c, h);
    bool notify = false, same = false;
    ges_cache_lock(part);
    if (CacheEntry* e = held_entry(c, h)) {
        same = true;
        if (write != nullptr && mode_writes_value(h.mode)) e->value = *write;
        notify = cache_drop(*e, h.mode);
    }
    forget_use_record(h.entry, h.generation);
    ges_cache_unlock(part);
    if (notify)
        (void)ges_send_client(GesMsgType::CacheNotify, &h.resource, route_key_for(h.resource),
                              LockMode::NL, 0, 0, 0, DenyReason::Cancelled, wait_ms);
    return same;
}

// A grant the LMS served from the node's cache (its token's low bits are a
// local take's): the session's use of that entry, found and recorded.
void attach_served_hold(GesHeld* h) {
    h->entry = UINT32_MAX;  // none: a void hold until found
    h->generation = 0;
    NodeCache* c = ges_node_cache();
    if (c == nullptr) return;
    const uint32_t part = c->partition_of(h->resource, ges_shard_of(h->resource));
    const int record = free_use_record();
    ges_cache_lock(part);
    const CacheEntry* e = c->find(part, h->resource);
    if (e != nullptr && h->token > e->grant_token && h->token < e->next_token) {
        h->entry = c->index_of(e);
        h->generation = e->generation;
        if (record >= 0)
            store_release(&ges_my_slot()->cached_uses[record], use_word(h->entry, h->generation));
    }
    ges_cache_unlock(part);
}

// The holder's next GES call learns that locks were lost: they are dropped
// from the session (and given back to the master, best effort) and an ERROR
// says which and why.
// f: the node's fence count now (node_fences()), read once by the caller.
void ges_void_lost_locks(uint32_t f) {
    if (g_nheld == 0 || shared() == nullptr) return;
    int lost = 0;
    bool node_fenced = false;
    char first[80] = "";
    for (int i = 0; i < g_nheld;) {
        if (f == g_held[i].fences && shard_fences(g_held[i].resource) == g_held[i].shard_fences) {
            i++;
            continue;
        }
        node_fenced = node_fenced || f != g_held[i].fences;
        if (lost++ == 0) ges_resource_text(g_held[i].resource, first, sizeof first);
        // The master may still list it (granted under the new fences while the
        // request waited in a ring): give it back, best effort. A cached one
        // is the node's: its entry is void with it.
        // A PW/EX lock lost leaves an invalid value block.
        const ResourceName r = g_held[i].resource;
        const LockValue invalid = LockValue::invalid();
        if (g_held[i].cached)
            drop_cached_use(g_held[i], 0, &invalid);
        else
            (void)ges_send_client(GesMsgType::Release, &r, route_key_for(r), LockMode::NL, 0, 0, 0,
                                  DenyReason::Cancelled, 0, &invalid);
        ges_drop_held(&g_held[i]);
    }
    if (lost == 0) return;
    ereport(ERROR,
            (errcode(ERRCODE_LOCK_NOT_AVAILABLE),
             errmsg("global lock lost: %d global lock(s) of this session, \"%s\" among them, are "
                    "void",
                    lost, first),
             errdetail(node_fenced ? "Node %d was fenced: it lost its membership lease (no "
                                     "quorum), and other nodes may hold these locks now."
                                   : "An LMS worker of node %d restarted and lost its part of "
                                     "these locks; other nodes may hold them now.",
                       pgrac_node_id),
             errhint("Take the locks again. Work done under them since then may conflict with "
                     "another holder's: upper layers check fencing tokens.")));
}

}  // namespace

void ges_drop_cache_use(const ResourceName& r, LockMode mode) {
    NodeCache* c = ges_node_cache();
    if (c == nullptr) return;
    const uint32_t part = c->partition_of(r, ges_shard_of(r));
    bool notify = false;
    ges_cache_lock(part);
    if (CacheEntry* e = c->find(part, r)) notify = cache_drop(*e, mode);
    ges_cache_unlock(part);
    if (notify)
        (void)ges_send_client(GesMsgType::CacheNotify, &r, route_key_for(r), LockMode::NL, 0, 0, 0,
                              DenyReason::Cancelled, 1000);
}

void ges_forget_held() {
    // Cached holds are uses of the node's locks: end them (the rest the
    // caller released through the LMS, whose masters mark a PW/EX lock's
    // value invalid). A PW/EX use released so leaves an invalid value too.
    const LockValue invalid = LockValue::invalid();
    for (int i = 0; i < g_nheld; i++)
        if (g_held[i].cached) drop_cached_use(g_held[i], 1000, &invalid);
    g_nheld = 0;
}

// ---- direct routing (docs/ges.md, "Direct routing")

namespace {

// Resources this session released lately (route key, when): with the node's
// cache on, such a lock is on its way into the cache (the Transfer's grant
// not back yet), and the LMS serves the next request from it once it is; a
// direct request would instead wait at the master behind the node's own
// cached lock. Those go through the LMS.
constexpr int kRecentReleases = 16;
constexpr uint64_t kRecentReleaseNs = 20 * 1000 * 1000;
struct RecentRelease {
    uint32_t route_key;
    uint64_t at_ns;
};
RecentRelease g_recent[kRecentReleases];
int g_recent_next = 0;

void note_release(const ResourceName& r) {
    g_recent[g_recent_next] = RecentRelease{route_key_for(r), monotonic_ns()};
    g_recent_next = (g_recent_next + 1) % kRecentReleases;
}

bool released_lately(uint32_t route_key) {
    const uint64_t now = monotonic_ns();
    for (const RecentRelease& x : g_recent)
        if (x.at_ns != 0 && x.route_key == route_key && now - x.at_ns < kRecentReleaseNs)
            return true;
    return false;
}

// The resource's home master in the committed view, if it is another node
// this one could send to directly, and the view's epoch; 0 otherwise.
uint16_t direct_master(const ResourceName& r, uint32_t* epoch) {
    IcShared* shm = shared();
    if (shm == nullptr || !pgrac_ges_direct_requests || shm->n_lms == 0) return 0;
    if (ges_node_cache() != nullptr && released_lately(route_key_for(r))) return 0;
    // Mastered away from its home in this epoch: the home would redirect it.
    const uint32_t rk = route_key_for(r);
    if (ges_maybe_moved(rk % shm->n_lms, rk)) return 0;
    const View v = committed_view(&shm->membership);
    if (!has_node(v.members, static_cast<uint16_t>(pgrac_node_id))) return 0;
    const NodeMask masters = v.members & ~witness_mask();
    uint16_t live[64];
    int n = 0;
    for (uint16_t id = 1; id <= 64; id++)  // no allocation here
        if (has_node(masters, id)) live[n++] = id;
    if (n == 0) return 0;
    uint16_t master = 0;
    char err[128];
    if (!guarded([&] { master = master_for(r, std::vector<uint16_t>(live, live + n)); }, err,
                 sizeof err) ||
        master == static_cast<uint16_t>(pgrac_node_id))
        return 0;
    *epoch = v.epoch;
    return master;
}

// How long a backend with an immediate grant waits for its LMS to open its
// slot before it hands the grant to the LMS instead.
constexpr uint64_t kRegistrationWaitNs = 1000000;

enum class Direct : uint8_t {
    Taken,     // granted at once: the slot completed by this backend
    Wait,      // the answer comes through this node's LMS
    Fallback,  // not served on the direct path: the LMS sends it
};

// The master's answer, handed to this node's LMS (as the master's reply).
int relay_answer(const ResourceName& r, const uint8_t* answer, uint32_t len) {
    return pgrac_ic_send(pgrac_node_id, ic::kMsgGesClient, route_key_for(r), answer, len,
                         PGRAC_IC_CONTROL, -1);
}

// The direct request (body, registered with this node's LMS already) on
// this backend's requester lane to master, and what its answer means.
Direct direct_attempt(GesWaitSlot* slot, const ResourceName& r, uint64_t id, const uint8_t* body,
                      size_t n, uint16_t master) {
    uint8_t answer[kEncodeMax];
    uint32_t len = 0;
    const int rc = requester_lane_call(master, ic::kMsgGesDirect, route_key_for(r), body,
                                       static_cast<uint32_t>(n), answer, sizeof answer, &len,
                                       pgrac_rpc_timeout_ms);
    if (rc != PGRAC_IC_OK) return Direct::Fallback;  // not sent, failed, or timed out
    GesShared* g = ges_shared();
    if (g != nullptr) pgrac::ic::count(&g->direct_sent);
    GesMessage a;
    char err[128];
    bool decoded = false;
    if (!guarded([&] { decoded = decode_ges_message(answer, len, &a) == GesWireError::None; }, err,
                 sizeof err) ||
        !decoded || a.owner != my_owner() || a.request_id != id || !(a.resource == r))
        return Direct::Fallback;
    switch (a.type) {
        case GesMsgType::Queued:
            return Direct::Wait;
        case GesMsgType::Deny:
            if (a.reason == DenyReason::Redirect) return Direct::Fallback;
            return relay_answer(r, answer, len) == PGRAC_IC_OK ? Direct::Wait : Direct::Fallback;
        case GesMsgType::Grant: {
            // Ours to complete only if the LMS opened the slot (registered in
            // the grant's epoch, not settled since): Delivering, the token and
            // value, then SelfGranted, which the LMS frees once it has the grant.
            // The registration may still be on its way to the LMS (through
            // the listener): a moment for it, as the LMS polls.
            const uint64_t until = monotonic_ns() + kRegistrationWaitNs;
            while (load_acquire(&slot->word) == ges_slot_word(id, kGesWaiting) &&
                   monotonic_ns() < until)
                sched_yield();
            uint64_t expected = ges_slot_word(id, kGesDirectReady);
            if (a.epoch != 0 &&
                compare_exchange(&slot->word, &expected, ges_slot_word(id, kGesDelivering))) {
                slot->value = a.value;
                store_release(&slot->token, a.token);
                store_release(&slot->word, ges_slot_word(id, kGesSelfGranted));
                if (g != nullptr) pgrac::ic::count(&g->direct_taken);
                const int sent = relay_answer(r, answer, len);
                // Not queued (no listener?): the grant is given back (ges_abandon).
                if (sent != PGRAC_IC_OK)
                    raise_status(sent, pgrac_node_id, "global lock grant", nullptr, 0);
                return Direct::Taken;
            }
            return relay_answer(r, answer, len) == PGRAC_IC_OK ? Direct::Wait : Direct::Fallback;
        }
        default:
            return Direct::Fallback;
    }
}

}  // namespace

// ---- lock, unlock, unlock all

namespace {

// CW and PR are unordered: if the conversion failed, giving the lock back to
// the held mode would itself be an up-conversion that may have to wait, and
// the session would believe a mode it does not hold.
void refuse_cw_pr_conversion(const GesHeld* h, const ResourceName& r, LockMode mode) {
    if (h == nullptr || h->mode == mode ||
        !((h->mode == LockMode::CW && mode == LockMode::PR) ||
          (h->mode == LockMode::PR && mode == LockMode::CW)))
        return;
    char name[80];
    ges_resource_text(r, name, sizeof name);
    ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                    errmsg("cannot convert global lock \"%s\" between CW and PR", name),
                    errdetail("CW and PR are unordered: neither includes the other."),
                    errhint("Convert to a mode that covers both (PW or EX), or release the lock "
                            "first.")));
}

// The master's denial (word: the slot's answer): false for NOWAIT and
// timeouts, an ERROR for the rest.
bool denied(const ResourceName& r, LockMode mode, uint64_t word) {
    const DenyReason why = static_cast<DenyReason>((word >> 8) & 0xff);
    char name[80];
    ges_resource_text(r, name, sizeof name);
    switch (why) {
        case DenyReason::NoWait:
        case DenyReason::Timeout:
            return false;
        case DenyReason::Deadlock:
            ereport(ERROR, (errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
                            errmsg("deadlock detected on global lock \"%s\"", name),
                            errdetail("This session was chosen as the victim of a cycle of "
                                      "global lock waits; its request for %s was withdrawn.",
                                      lock_mode_name(mode)),
                            errhint("Locks this session already holds are kept; release them "
                                    "or retry.")));
            break;
        case DenyReason::NoQuorum:
            ges_void_lost_locks();
            ereport(ERROR,
                    (errcode(ERRCODE_LOCK_NOT_AVAILABLE),
                     errmsg("global lock request for \"%s\" was refused: no_quorum", name),
                     errdetail("Node %d is not a member of the cluster with a valid lease "
                               "(starting, fenced, or cut off from a majority).",
                               pgrac_node_id),
                     errhint("See pg_cluster_membership; retry once the node is a member.")));
            break;
        default:
            ereport(ERROR, (errcode(ERRCODE_LOCK_NOT_AVAILABLE),
                            errmsg("global lock request for \"%s\" was refused: %s", name,
                                   deny_reason_name(why))));
    }
    return false;
}

}  // namespace

bool ges_lock(const ResourceName& r, LockMode mode, int timeout_ms) {
    if (timeout_ms < -1)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("timeout_ms must be -1 (wait), 0 (NOWAIT) or positive")));
    GesWaitSlot* slot = ges_prepare();
    // The node's fence count, read once (a lease check and a clock read):
    // for the session's other locks and for this one's grant or take.
    const uint32_t fences0 = node_fences();
    const uint32_t shard0 = shard_fences(r);
    ges_void_lost_locks(fences0);
    GesHeld* h = ges_find_held(r);
    refuse_cw_pr_conversion(h, r, mode);
    if (h != nullptr && h->mode == mode) {
        h->count++;
        return true;
    }
    if (h == nullptr && ges_held_count() >= kGesMaxHeld)
        ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                        errmsg("this session holds too many global locks (%d)", kGesMaxHeld)));
    // The node's cache first: no message, no other process woken.
    CacheMiss miss = CacheMiss::NotCached;
    {
        uint64_t token;
        uint32_t entry, generation;
        LockValue value;
        if (h != nullptr) settle_hold(h);
        if (h == nullptr && cache_take_local(r, mode, LockMode::NL, fences0, shard0, &token, &entry,
                                             &generation, nullptr, &value, &miss)) {
            ges_add_held(GesHeld{r, mode, 1, fences0, shard0, token, true, entry, generation, value,
                                 false, false, LockMode::NL});
            return true;
        }
        if (h != nullptr && h->cached &&
            cache_take_local(r, mode, h->mode, h->fences, h->shard_fences, &token, &entry,
                             &generation, value_to_write(*h, mode), &value)) {
            h->mode = mode;
            h->count++;
            h->token = token;
            h->value = value;
            h->value_dirty = false;
            return true;
        }
    }
    // A conversion of a cached hold goes to the LMS as Convert: it waits
    // there until this session is the lock's only local user, and the lock
    // becomes the session's own at the master.
    const bool cached_conversion = h != nullptr && h->cached;
    // A conversion of a PW/EX lock to a weaker mode writes its value.
    const LockValue* write = h != nullptr ? value_to_write(*h, mode) : nullptr;
    // A down-conversion is granted at once by the master, and never
    // withdrawn: a session that stops waiting for one takes it as made (and
    // so does its LMS), so that it never believes a stronger mode than the
    // master granted. The session's own lock's is waited for without a limit.
    const bool down = h != nullptr && mode != h->mode && mode_at_most(mode, h->mode);
    const uint64_t id = ges_next_request_id();
    // NOWAIT still needs the master's answer; bound it (a remastering can
    // hold it back for up to the peer timeout).
    const int64_t limit_ms = down && !cached_conversion ? -1
                             : timeout_ms > 0           ? timeout_ms
                             : timeout_ms == 0 ? pgrac_rpc_timeout_ms + 2 * pgrac_peer_timeout_ms
                                               : -1;
    uint64_t word = 0;
    bool timed_out = false;
    const uint8_t flags = timeout_ms == 0 ? kNoWait : 0;
    const uint32_t wire_timeout = timeout_ms > 0 ? static_cast<uint32_t>(timeout_ms) : 0;
    ges_arm(slot,
            GesRequest{id, r, mode, flags, wire_timeout, h != nullptr, h ? h->mode : LockMode::NL,
                       cached_conversion, write != nullptr ? *write : LockValue{}});
    volatile bool sent = false;
    // From the armed slot to the end of the wait, any error (a cancel, a
    // failed send, anything raised in between) withdraws the request and
    // gives back a grant that won the race.
    // A new lock mastered on another node goes there on this backend's own
    // lane (direct routing), registered with the LMS at the same time; not
    // one the node caches (its LMS serves it, or queues it behind a local user).
    uint32_t direct_epoch = 0;
    const uint16_t direct_to =
        h == nullptr && miss == CacheMiss::NotCached ? direct_master(r, &direct_epoch) : 0;
    PG_TRY();
    {
        // Room in the send queue is waited for within the caller's limit.
        const int rc = ges_send_client(
            cached_conversion ? GesMsgType::Convert : GesMsgType::Request, &r, route_key_for(r),
            mode, id, direct_to != 0 ? static_cast<uint8_t>(flags | kDirect) : flags, wire_timeout,
            DenyReason::Cancelled, limit_ms >= 0 ? static_cast<int>(limit_ms) : -1, write,
            direct_epoch);
        sent = rc == PGRAC_IC_OK;
        Direct path = Direct::Wait;
        if (rc == PGRAC_IC_OK && direct_to != 0) {
            uint8_t body[kEncodeMax];
            char err[256];
            const size_t n = encode_msg(
                GesMsgType::Request, &r, mode, id, static_cast<uint8_t>(flags | kDirect),
                wire_timeout, DenyReason::Cancelled, nullptr, direct_epoch, body, err, sizeof err);
            path = n == 0 ? Direct::Fallback : direct_attempt(slot, r, id, body, n, direct_to);
            if (path == Direct::Fallback) {
                // The LMS sends it (the same request: a copy the master has
                // already is refused there).
                const int rc2 = ges_send_client(GesMsgType::Request, &r, route_key_for(r), mode, id,
                                                flags, wire_timeout, DenyReason::Cancelled, -1);
                if (rc2 != PGRAC_IC_OK)
                    raise_status(rc2, pgrac_node_id, "global lock request", nullptr, 0);
            }
        }
        if (path == Direct::Taken) {
            word = ges_slot_word(id, kGesGranted);
        } else if (rc != PGRAC_IC_OK) {
            // Not queued: nothing to withdraw.
            ges_disarm(slot);
            if (rc == PGRAC_IC_QUEUE_FULL && timeout_ms > 0) {
                timed_out = true;  // not granted within timeout_ms, like pg_try_advisory_lock
            } else {
                raise_status(rc, pgrac_node_id, "global lock request", nullptr, 0);
            }
        } else {
            ges_wait_answer(slot, timeout_ms, limit_ms, &word, &timed_out);
        }
    }
    PG_CATCH();
    {
        ges_abandon(slot, DenyReason::Cancelled);
        if (GesHeld* held = ges_find_held(r); held != nullptr && down && sent) {
            if (!held->cached) {
                held->mode = mode;  // made at the master, whatever happens now
                held->value_dirty = held->value_dirty && write == nullptr;
            } else {
                held->has_pending_down = true;  // made if the LMS took it to the master
                held->pending_down = mode;
            }
        }
        if (GesHeld* held = ges_find_held(r)) settle_hold(held);
        PG_RE_THROW();
    }
    PG_END_TRY();
    h = ges_find_held(r);
    if (h != nullptr) settle_hold(h);  // still cached, or the session's own now
    if (timed_out) return false;
    // The answer's token and value: the LMS wrote them before it published
    // the answer, and nothing writes them while the slot is armed for it.
    const uint64_t token = load_acquire(&slot->token);
    const LockValue value = slot->value;
    ges_disarm(slot);
    if ((word & 0xff) != kGesGranted) return denied(r, mode, word);
    if (h == nullptr && (token & (kCacheTokenRange - 1)) != 0) {
        // Served by the LMS from the node's cache: a use of the node's lock.
        GesHeld held{r, mode, 1,     fences0, shard0, token,       true,
                     0, 0,    value, false,   false,  LockMode::NL};
        attach_served_hold(&held);
        ges_add_held(held);
        ges_void_lost_locks();
        return true;
    }
    if (h != nullptr) {
        h->mode = mode;
        h->count++;
        h->token = token;
        h->cached = false;
        h->value = value;
        h->value_dirty = false;
    } else {
        ges_add_held(GesHeld{r, mode, 1, fences0, shard0, token, false, 0, 0, value, false, false,
                             LockMode::NL});
    }
    // Fenced while we waited: the grant is void like the rest.
    ges_void_lost_locks();
    return true;
}

bool ges_unlock(const ResourceName& r) {
    ges_void_lost_locks();
    GesHeld* h = ges_find_held(r);
    if (h == nullptr) {
        char name[80];
        ges_resource_text(r, name, sizeof name);
        ereport(WARNING, (errmsg("you don't own a global lock on \"%s\"", name)));
        return false;
    }
    if (h->count > 1) {
        h->count--;
        return true;
    }
    if (h->cached) {
        // A use of the node's lock ends: nothing to tell the master (one
        // partition lock). If the entry is gone while the fences stayed (else
        // ges_void_lost_locks would have raised), the LMS made the lock this
        // session's own: it is released at the master below.
        if (drop_cached_use(*h, 1000, value_to_write(*h, LockMode::NL))) {
            ges_drop_held(h);
            return true;
        }
        h->cached = false;
    }
    // The last level: the session keeps the lock until the Release is queued
    // (if it cannot be, the caller gets the error and the lock is still held,
    // for a retry, pgrac_ges_unlock_all() or the end of the session).
    const int rc = ges_send_client(GesMsgType::Release, &r, route_key_for(r), LockMode::NL, 0, 0, 0,
                                   DenyReason::Cancelled, -1, value_to_write(*h, LockMode::NL));
    if (rc != PGRAC_IC_OK) raise_status(rc, pgrac_node_id, "global lock release", nullptr, 0);
    note_release(r);
    ges_drop_held(ges_find_held(r));
    return true;
}

int ges_unlock_all() {
    ges_void_lost_locks();
    const int n = ges_held_count();
    if (ges_session_used()) {
        ges_prepare();
        const int rc = ges_send_release_all(-1);
        // Locks stay recorded as held unless every worker got the ReleaseAll.
        if (rc != PGRAC_IC_OK) raise_status(rc, pgrac_node_id, "global lock release", nullptr, 0);
    }
    ges_forget_held();
    return n;
}

namespace {

GesHeld* held_or_error(const ResourceName& r) {
    ges_void_lost_locks();
    GesHeld* h = ges_find_held(r);
    if (h == nullptr) {
        char name[80];
        ges_resource_text(r, name, sizeof name);
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("this session holds no global lock on \"%s\"", name),
                        errhint("A lock value block is read and written under the lock: take "
                                "it first with pgrac_ges_lock().")));
    }
    return h;
}

}  // namespace

bool ges_lock_value(const ResourceName& r, LockValue* out) {
    const GesHeld* h = held_or_error(r);
    *out = h->value;
    return h->value.state == ValueState::Valid;
}

void ges_set_lock_value(const ResourceName& r, const void* bytes, int len) {
    if (len < 0 || len > kMaxLockValue)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("a lock value block is 0 to %d bytes, not %d", kMaxLockValue, len)));
    GesHeld* h = held_or_error(r);
    if (!mode_writes_value(h->mode)) {
        char name[80];
        ges_resource_text(r, name, sizeof name);
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("cannot write the lock value block of \"%s\" under %s", name,
                               lock_mode_name(h->mode)),
                        errdetail("Only a PW or EX holder writes a resource's value block.")));
    }
    h->value = LockValue::valid(bytes, static_cast<size_t>(len));
    h->value_dirty = true;
}

bool ges_held_token(const ResourceName& r, uint64_t* token) {
    ges_void_lost_locks();
    const GesHeld* h = ges_find_held(r);
    if (h == nullptr) return false;
    *token = h->token;
    return true;
}

}  // namespace pgrac::glue
