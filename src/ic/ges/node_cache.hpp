// Node-level lock caching (docs/ges.md, "Node-level caching"): the table, in
// shared memory, of the global locks this node keeps after their last local
// user released them, and the rules by which a backend takes one again
// without a message.
//
// A cached lock is the grant of the node's own owner (node, proc 0) at the
// master, with the mode and fencing token of the backend grant it came from
// (Transfer). A backend takes a mode from it when the cached mode covers it,
// the other local users' modes are compatible, no BAST or local conversion
// waits, the node's and the shard's fence counts are those of the caching,
// and a token of the entry's range is left; each take gets the next token
// (master tokens leave kCacheTokenBits low bits for that, so tokens still grow
// strictly per resource across the cluster). Everything else misses and goes
// to the master as an ordinary request.
//
// The memory is formatted once (format) and attached by every process
// (attach); entries are plain data (trivially copyable, offsets not
// pointers). Partitions split each LMS worker's share: only that worker
// inserts, evicts and frees entries of its partitions, backends change the
// users of an entry. Callers hold the partition's lock around every call
// below (the glue's LWLocks; the unit tests need none). No PostgreSQL here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ic/ges/mode.hpp"
#include "ic/ges/resource.hpp"
#include "ic/ges/types.hpp"

namespace pgrac::ic::ges {

// A master grant's token is epoch << 32 | grant count << kCacheTokenBits: the
// low bits number the local takes of a cached lock made from that grant.
inline constexpr int kCacheTokenBits = 8;
inline constexpr uint64_t kCacheTokenRange = uint64_t{1} << kCacheTokenBits;

// Partitions of one LMS worker's share (each its own lock in the glue).
inline constexpr uint32_t kCachePartsPerWorker = 16;

enum CacheState : uint8_t { kCacheFree = 0, kCacheCached = 1 };

struct CacheEntry {
    ResourceName resource;
    uint8_t state;       // CacheState
    uint8_t mode;        // LockMode the node owner holds at the master
    uint8_t bast;        // 0, or 1 + the mode a BAST said is blocked (no new take)
    uint8_t referenced;  // the eviction clock's bit: taken since the hand passed
    uint8_t converting;  // a local user's conversion waits at the LMS (no new take)
    uint8_t waiting;     // local requests wait at the LMS (no new take ahead of them)
    uint8_t pad[2];
    uint32_t generation;  // bumped when the entry is freed: a use names (index, generation)
    int32_t next;         // next entry of its bucket (-1: none)
    uint32_t users[kLockModeCount];  // local users by mode
    uint32_t fences;                 // the node's fence count when cached
    uint32_t shard_fences;           // the shard's fence count when cached
    uint64_t next_token;             // the next local take's token
    uint64_t token_end;              // first token past the range
    uint64_t grant_token;            // the master grant's token (the range's start)
    uint64_t hits;                   // local takes served
    // The lock value block (docs/ges.md, "Lock value blocks"): the master's
    // grant's, then what local PW/EX users wrote; it goes back with the lock.
    LockValue value;
};

// Why a take missed (counted; the view and the bench read them).
enum class CacheMiss : uint8_t {
    None = 0,
    NotCached,       // no entry (or freed)
    Fenced,          // the node or the shard was fenced since the caching
    Bast,            // a BAST or a local conversion waits: the lock is on its way back
    ModeNotCovered,  // the cached mode does not cover the request
    LocalConflict,   // another local user's mode conflicts
    RangeUsedUp,     // no token left: the master must grant again
};

uint32_t cache_users(const CacheEntry& e);

// A local take of `mode` by a session that already uses the entry in `prior`
// (NL: a new take). Taken: the counts and *token are set, the take is counted.
// While local requests wait at the LMS (`waiting`), a new take is a
// LocalConflict (it queues behind them), except the LMS's own take for the
// first of them (queue_head).
CacheMiss cache_take(CacheEntry& e, LockMode mode, LockMode prior, uint32_t fences,
                     uint32_t shard_fences, uint64_t* token, bool queue_head = false);
// Drops one local use of `mode`. True if the LMS must look at the entry now:
// a BAST, a local conversion or a local request waits on it.
bool cache_drop(CacheEntry& e, LockMode mode);

class NodeCache {
  public:
    // Bytes for `workers` LMS workers of `entries_per_worker` entries each.
    static size_t bytes_for(uint32_t workers, uint32_t entries_per_worker);
    // Formats mem (bytes_for bytes); every entry free.
    static NodeCache format(void* mem, uint32_t workers, uint32_t entries_per_worker);
    // Attaches to memory format() prepared (in any process).
    static NodeCache attach(void* mem);
    NodeCache() = default;

    bool enabled() const { return head_ != nullptr && head_->entries_per_part > 0; }
    uint32_t partitions() const { return head_ ? head_->workers * kCachePartsPerWorker : 0; }
    uint32_t entries_per_partition() const { return head_ ? head_->entries_per_part : 0; }
    // The partition of r, whose LMS worker (worker_for) is `worker`.
    uint32_t partition_of(const ResourceName& r, uint32_t worker) const;
    // The worker whose partitions these are.
    static uint32_t worker_of_partition(uint32_t part) { return part / kCachePartsPerWorker; }

    // ---- under the partition's lock
    CacheEntry* find(uint32_t part, const ResourceName& r);
    // A free entry put in r's bucket (state still Free: the caller fills it
    // and sets Cached), or nullptr when the partition has none free.
    CacheEntry* insert(uint32_t part, const ResourceName& r);
    // The entry to evict (clock): cached, unused, nothing waiting on it, not
    // taken since the hand last passed; nullptr if none.
    CacheEntry* victim(uint32_t part);
    // Takes the entry out of its bucket and frees it (generation bumped).
    void erase(uint32_t part, CacheEntry* e);
    uint32_t used(uint32_t part) const;
    // Entries by global index (partition * entries_per_partition + slot).
    uint32_t index_of(const CacheEntry* e) const;
    CacheEntry* at(uint32_t index);
    uint32_t capacity() const { return partitions() * entries_per_partition(); }

  private:
    struct Header {
        uint32_t magic;
        uint32_t workers;
        uint32_t entries_per_part;
        uint32_t buckets_per_part;
    };
    struct Part {
        int32_t free_head;
        uint32_t hand;
        uint32_t used;
        uint32_t pad;
    };
    Part* part(uint32_t p) const;
    int32_t* buckets(uint32_t p) const;
    CacheEntry* entries(uint32_t p) const;
    uint32_t bucket_of(const ResourceName& r) const;

    Header* head_ = nullptr;
};

}  // namespace pgrac::ic::ges
