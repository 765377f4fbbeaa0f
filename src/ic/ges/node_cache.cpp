// The node's lock cache (node_cache.hpp): layout, buckets, the eviction clock,
// and the take/drop rules.
#include "ic/ges/node_cache.hpp"

#include <cstring>
#include <type_traits>

namespace pgrac::ic::ges {

static_assert(std::is_trivially_copyable_v<CacheEntry> && std::is_standard_layout_v<CacheEntry>,
              "cache entries live in shared memory");

namespace {
constexpr uint32_t kMagic = 0x67657363;  // "gesc"

size_t align8(size_t n) {
    return (n + 7) & ~size_t{7};
}
}  // namespace

uint32_t cache_users(const CacheEntry& e) {
    uint32_t n = 0;
    for (uint32_t u : e.users) n += u;
    return n;
}

CacheMiss cache_take(CacheEntry& e, LockMode mode, LockMode prior, uint32_t fences,
                     uint32_t shard_fences, uint64_t* token, bool queue_head) {
    if (e.state != kCacheCached) return CacheMiss::NotCached;
    if (e.fences != fences || e.shard_fences != shard_fences) return CacheMiss::Fenced;
    if (e.bast != 0 || e.converting != 0) return CacheMiss::Bast;
    if (!mode_at_most(mode, static_cast<LockMode>(e.mode))) return CacheMiss::ModeNotCovered;
    // Local requests wait for this entry (FIFO): a new one goes behind them.
    if (e.waiting != 0 && !queue_head && prior == LockMode::NL) return CacheMiss::LocalConflict;
    // The other users: every use but this session's own (prior).
    for (int m = 0; m < kLockModeCount; ++m) {
        uint32_t n = e.users[m];
        if (prior != LockMode::NL && m == static_cast<int>(prior)) n--;
        if (n > 0 && !modes_compatible(mode, static_cast<LockMode>(m)))
            return CacheMiss::LocalConflict;
    }
    if (e.next_token >= e.token_end) return CacheMiss::RangeUsedUp;
    if (prior != LockMode::NL) e.users[static_cast<int>(prior)]--;
    e.users[static_cast<int>(mode)]++;
    *token = e.next_token++;
    e.referenced = 1;
    e.hits++;
    return CacheMiss::None;
}

bool cache_drop(CacheEntry& e, LockMode mode) {
    uint32_t& n = e.users[static_cast<int>(mode)];
    if (n > 0) n--;
    return e.bast != 0 || e.converting != 0 || e.waiting != 0;
}

// ---- layout: header, then per partition a Part, then all buckets, then all entries

size_t NodeCache::bytes_for(uint32_t workers, uint32_t entries_per_worker) {
    const uint64_t parts = uint64_t{workers} * kCachePartsPerWorker;
    const uint64_t per_part =
        (entries_per_worker + kCachePartsPerWorker - 1) / kCachePartsPerWorker;
    const uint64_t buckets = per_part;  // load factor <= 1
    return align8(sizeof(Header)) + align8(parts * sizeof(Part)) +
           align8(parts * buckets * sizeof(int32_t)) + parts * per_part * sizeof(CacheEntry);
}

NodeCache NodeCache::format(void* mem, uint32_t workers, uint32_t entries_per_worker) {
    NodeCache c;
    c.head_ = static_cast<Header*>(mem);
    c.head_->magic = kMagic;
    c.head_->workers = workers;
    c.head_->entries_per_part =
        (entries_per_worker + kCachePartsPerWorker - 1) / kCachePartsPerWorker;
    c.head_->buckets_per_part = c.head_->entries_per_part;
    for (uint32_t p = 0; p < c.partitions(); ++p) {
        Part* pt = c.part(p);
        pt->hand = 0;
        pt->used = 0;
        pt->pad = 0;
        int32_t* b = c.buckets(p);
        for (uint32_t i = 0; i < c.head_->buckets_per_part; ++i) b[i] = -1;
        CacheEntry* e = c.entries(p);
        const uint32_t n = c.head_->entries_per_part;
        for (uint32_t i = 0; i < n; ++i) {
            e[i] = CacheEntry{};
            e[i].next = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
        }
        pt->free_head = n > 0 ? 0 : -1;
    }
    return c;
}

NodeCache NodeCache::attach(void* mem) {
    NodeCache c;
    auto* h = static_cast<Header*>(mem);
    if (h != nullptr && h->magic == kMagic) c.head_ = h;
    return c;
}

NodeCache::Part* NodeCache::part(uint32_t p) const {
    auto* base = reinterpret_cast<char*>(head_) + align8(sizeof(Header));
    return reinterpret_cast<Part*>(base) + p;
}

int32_t* NodeCache::buckets(uint32_t p) const {
    auto* base = reinterpret_cast<char*>(head_) + align8(sizeof(Header)) +
                 align8(uint64_t{partitions()} * sizeof(Part));
    return reinterpret_cast<int32_t*>(base) + uint64_t{p} * head_->buckets_per_part;
}

CacheEntry* NodeCache::entries(uint32_t p) const {
    auto* base = reinterpret_cast<char*>(head_) + align8(sizeof(Header)) +
                 align8(uint64_t{partitions()} * sizeof(Part)) +
                 align8(uint64_t{partitions()} * head_->buckets_per_part * sizeof(int32_t));
    return reinterpret_cast<CacheEntry*>(base) + uint64_t{p} * head_->entries_per_part;
}

uint32_t NodeCache::partition_of(const ResourceName& r, uint32_t worker) const {
    // The high hash bits: route_key_for (the worker) uses the low ones.
    const uint32_t sub = static_cast<uint32_t>(r.hash() >> 40) % kCachePartsPerWorker;
    return worker * kCachePartsPerWorker + sub;
}

uint32_t NodeCache::bucket_of(const ResourceName& r) const {
    return static_cast<uint32_t>((r.hash() >> 8) % head_->buckets_per_part);
}

CacheEntry* NodeCache::find(uint32_t p, const ResourceName& r) {
    if (!enabled() || p >= partitions()) return nullptr;
    CacheEntry* e = entries(p);
    for (int32_t i = buckets(p)[bucket_of(r)]; i >= 0; i = e[i].next)
        if (e[i].state != kCacheFree && e[i].resource == r) return &e[i];
    return nullptr;
}

CacheEntry* NodeCache::insert(uint32_t p, const ResourceName& r) {
    if (!enabled() || p >= partitions()) return nullptr;
    Part* pt = part(p);
    if (pt->free_head < 0) return nullptr;
    CacheEntry* e = entries(p);
    const int32_t i = pt->free_head;
    pt->free_head = e[i].next;
    const uint32_t gen = e[i].generation;
    e[i] = CacheEntry{};
    e[i].generation = gen;
    e[i].resource = r;
    int32_t& head = buckets(p)[bucket_of(r)];
    e[i].next = head;
    head = i;
    pt->used++;
    return &e[i];
}

CacheEntry* NodeCache::victim(uint32_t p) {
    if (!enabled() || p >= partitions()) return nullptr;
    Part* pt = part(p);
    CacheEntry* e = entries(p);
    const uint32_t n = head_->entries_per_part;
    // Two turns at most: the first clears the bits it passes.
    for (uint32_t step = 0; step < 2 * n; ++step) {
        CacheEntry& c = e[pt->hand];
        pt->hand = (pt->hand + 1) % n;
        if (c.state != kCacheCached || cache_users(c) != 0 || c.converting != 0) continue;
        if (c.referenced) {
            c.referenced = 0;
            continue;
        }
        return &c;
    }
    return nullptr;
}

void NodeCache::erase(uint32_t p, CacheEntry* x) {
    Part* pt = part(p);
    CacheEntry* e = entries(p);
    const auto i = static_cast<int32_t>(x - e);
    int32_t* link = &buckets(p)[bucket_of(x->resource)];
    while (*link >= 0 && *link != i) link = &e[*link].next;
    if (*link == i) *link = e[i].next;
    const uint32_t gen = e[i].generation + 1;
    e[i] = CacheEntry{};
    e[i].generation = gen;
    e[i].next = pt->free_head;
    pt->free_head = i;
    pt->used--;
}

uint32_t NodeCache::used(uint32_t p) const {
    return enabled() && p < partitions() ? part(p)->used : 0;
}

uint32_t NodeCache::index_of(const CacheEntry* x) const {
    const CacheEntry* base = entries(0);
    return static_cast<uint32_t>(x - base);
}

CacheEntry* NodeCache::at(uint32_t index) {
    if (!enabled() || index >= capacity()) return nullptr;
    return entries(0) + index;
}

}  // namespace pgrac::ic::ges
