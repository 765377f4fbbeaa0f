// Helpers for tests of the node's lock cache on whole clusters of workers
// (worker_support.hpp): a cluster with caching on, a node's entry for a
// resource, a backend's take from it, and a node's local waiters' rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ges/worker_support.hpp"
#include "ic/ges/node_cache.hpp"

namespace pgrac::ic::ges::testing {

inline GesCluster cached_cluster(uint16_t n) {
    GesCluster c(n);
    std::vector<uint16_t> all;
    for (uint16_t i = 1; i <= n; i++) {
        all.push_back(i);
        c.host(i).enable_cache(256);
    }
    c.commit_view(10, all);
    return c;
}

inline CacheEntry* entry(GesCluster& c, uint16_t node, const ResourceName& r) {
    NodeCache& nc = c.host(node).cache;
    return nc.find(nc.partition_of(r, 0), r);
}

// A backend of `node` takes r in `mode` from the cache, as lock_client.cpp does.
inline CacheMiss try_take(GesCluster& c, uint16_t node, const ResourceName& r, LockMode mode,
                          uint64_t* token, LockMode prior = LockMode::NL) {
    CacheEntry* e = entry(c, node, r);
    if (e == nullptr) return CacheMiss::NotCached;
    return cache_take(*e, mode, prior, lease_fences(c.host(node).lease_word()),
                      c.host(node).shard_fence[0], token);
}

inline bool take(GesCluster& c, uint16_t node, const ResourceName& r, LockMode mode,
                 uint64_t* token) {
    return try_take(c, node, r, mode, token) == CacheMiss::None;
}

// r cached on `node` in `mode` (backend 10's lock released there), then taken
// from the cache once (*token: the take's).
inline bool cached_then_taken(GesCluster& c, uint16_t node, const ResourceName& r, LockMode mode,
                              uint64_t* token) {
    c.request(node, 10, r, mode);
    c.release(node, 10, r);
    return take(c, node, r, mode, token);
}

// r cached on `node` in EX (a backend's lock released there) and taken from
// the cache by backend `proc`, which the host names as its user (for the
// deadlock search).
inline bool cached_and_used_by(GesCluster& c, uint16_t node, const ResourceName& r, uint32_t proc) {
    c.request(node, proc - 1, r, LockMode::EX);
    c.release(node, proc - 1, r);
    uint64_t t = 0;
    if (!take(c, node, r, LockMode::EX, &t)) return false;
    CacheEntry* e = entry(c, node, r);
    c.host(node).users_of[{c.host(node).cache.index_of(e), e->generation}] = {proc};
    return true;
}

// The local waiters' rows of node's LMS for r (its view rows marked local).
inline size_t local_rows(GesCluster& c, uint16_t node, const ResourceName& r) {
    size_t n = 0;
    for (const LockRow& row : c.worker(node).snapshot())
        if (row.local && row.resource == r.to_string()) n++;
    return n;
}

}  // namespace pgrac::ic::ges::testing
