// A cache of memory registrations keyed by {address, length}, with LRU
// eviction, pinning (a registration in use by a posted work request is never
// evicted) and hit/miss counters. The registration itself is behind
// MrRegistrar, so the cache is testable without a device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace pgrac::tiers {

// One registration as the device sees it.
struct MrHandle {
    void* mr = nullptr;  // opaque (ibv_mr* for the verbs registrar)
    uint32_t lkey = 0, rkey = 0;
};

class MrRegistrar {
  public:
    virtual ~MrRegistrar() = default;
    // False with *error set when the region cannot be registered.
    virtual bool reg(void* addr, size_t len, MrHandle* out, std::string* error) = 0;
    virtual void dereg(const MrHandle& h) = 0;
};

// ibv_reg_mr/ibv_dereg_mr on a protection domain (an ibv_pd*), local access.
std::unique_ptr<MrRegistrar> make_ibv_registrar(void* pd);

class MrCache {
  public:
    struct Stats {
        uint64_t hits = 0, misses = 0, evictions = 0, failures = 0;
        size_t entries = 0, pinned = 0;
    };

    MrCache(MrRegistrar& registrar, size_t capacity)
        : reg_(registrar), capacity_(capacity == 0 ? 1 : capacity) {}
    ~MrCache() { clear(); }
    MrCache(const MrCache&) = delete;
    MrCache& operator=(const MrCache&) = delete;

    // The registration of exactly {addr, len}: a hit moves it to the front, a
    // miss registers it (evicting the least recently used unpinned entry when
    // full). With pin, the entry stays until unpin(). nullptr on failure.
    const MrHandle* acquire(const void* addr, size_t len, bool pin, std::string* error);
    void unpin(const void* addr, size_t len);
    // The registration of exactly {addr, len} is pinned (a posted work
    // request still reads it).
    bool pinned(const void* addr, size_t len) const;
    // A registered region that contains [addr, addr+len), counted as a hit;
    // nullptr (not counted) if none does. Does not register.
    const MrHandle* find_covering(const void* addr, size_t len, bool pin, const void** base,
                                  size_t* base_len);
    // Drops every registration (pinned ones too: only when nothing is in flight).
    void clear();
    Stats stats() const;

  private:
    using Key = std::pair<uintptr_t, size_t>;
    struct Entry {
        MrHandle h;
        int pins = 0;
        std::list<Key>::iterator lru;  // position in lru_ (front = most recent)
    };
    void touch(Entry& e);
    bool evict_one();

    MrRegistrar& reg_;
    size_t capacity_;
    std::map<Key, Entry> entries_;  // ordered: find_covering looks at the neighbours
    std::list<Key> lru_;
    Stats stats_;
};

}  // namespace pgrac::tiers
