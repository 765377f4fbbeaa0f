// MR cache: exact-key lookups with LRU eviction of unpinned entries.
#include "tiers/verbs/mr_cache.hpp"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

namespace pgrac::tiers {

namespace {

class IbvRegistrar final : public MrRegistrar {
  public:
    explicit IbvRegistrar(ibv_pd* pd) : pd_(pd) {}
    bool reg(void* addr, size_t len, MrHandle* out, std::string* error) override {
        ibv_mr* mr = ibv_reg_mr(pd_, addr, len, IBV_ACCESS_LOCAL_WRITE);
        if (mr == nullptr) {
            if (error)
                *error = std::string("ibv_reg_mr: ") + std::strerror(errno) +
                         " (check ulimit -l, the locked-memory limit)";
            return false;
        }
        out->mr = mr;
        out->lkey = mr->lkey;
        out->rkey = mr->rkey;
        return true;
    }
    void dereg(const MrHandle& h) override {
        if (h.mr != nullptr) ibv_dereg_mr(static_cast<ibv_mr*>(h.mr));
    }

  private:
    ibv_pd* pd_;
};

}  // namespace

std::unique_ptr<MrRegistrar> make_ibv_registrar(void* pd) {
    return std::make_unique<IbvRegistrar>(static_cast<ibv_pd*>(pd));
}

void MrCache::touch(Entry& e) {
    lru_.splice(lru_.begin(), lru_, e.lru);
}

bool MrCache::evict_one() {
    for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
        auto e = entries_.find(*it);
        if (e == entries_.end() || e->second.pins > 0) continue;
        reg_.dereg(e->second.h);
        lru_.erase(std::next(it).base());
        entries_.erase(e);
        ++stats_.evictions;
        return true;
    }
    return false;  // everything is pinned
}

const MrHandle* MrCache::acquire(const void* addr, size_t len, bool pin, std::string* error) {
    const Key key{reinterpret_cast<uintptr_t>(addr), len};
    auto it = entries_.find(key);
    if (it != entries_.end()) {
        ++stats_.hits;
        touch(it->second);
        if (pin) ++it->second.pins;
        return &it->second.h;
    }
    ++stats_.misses;
    while (entries_.size() >= capacity_)
        if (!evict_one()) break;  // over capacity while all are pinned
    MrHandle h;
    if (!reg_.reg(const_cast<void*>(addr), len, &h, error)) {
        ++stats_.failures;
        return nullptr;
    }
    try {
        lru_.push_front(key);
        Entry& e = entries_[key];
        e.h = h;
        e.lru = lru_.begin();
        e.pins = pin ? 1 : 0;
        return &e.h;
    } catch (...) {
        if (!lru_.empty() && lru_.front() == key) lru_.pop_front();
        entries_.erase(key);
        reg_.dereg(h);
        if (error) *error = "out of memory";
        return nullptr;
    }
}

const MrHandle* MrCache::find_covering(const void* addr, size_t len, bool pin, const void** base,
                                       size_t* base_len) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    // Entries starting at or before addr, nearest first; regions rarely overlap,
    // so the first few are enough.
    auto it = entries_.upper_bound(Key{a, SIZE_MAX});
    for (int tries = 0; tries < 4 && it != entries_.begin(); ++tries) {
        --it;
        const uintptr_t s = it->first.first;
        const size_t l = it->first.second;
        if (a >= s && a - s <= l && len <= l - (a - s)) {
            ++stats_.hits;
            touch(it->second);
            if (pin) ++it->second.pins;
            if (base) *base = reinterpret_cast<const void*>(s);
            if (base_len) *base_len = l;
            return &it->second.h;
        }
    }
    return nullptr;
}

void MrCache::unpin(const void* addr, size_t len) {
    auto it = entries_.find(Key{reinterpret_cast<uintptr_t>(addr), len});
    if (it != entries_.end() && it->second.pins > 0) --it->second.pins;
}

bool MrCache::pinned(const void* addr, size_t len) const {
    auto it = entries_.find(Key{reinterpret_cast<uintptr_t>(addr), len});
    return it != entries_.end() && it->second.pins > 0;
}

void MrCache::clear() {
    for (auto& [k, e] : entries_) reg_.dereg(e.h);
    entries_.clear();
    lru_.clear();
}

MrCache::Stats MrCache::stats() const {
    Stats s = stats_;
    s.entries = entries_.size();
    s.pinned = 0;
    for (const auto& [k, e] : entries_)
        if (e.pins > 0) ++s.pinned;
    return s;
}

}  // namespace pgrac::tiers
