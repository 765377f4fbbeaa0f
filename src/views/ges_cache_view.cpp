// pg_cluster_ges_cache (this node's cached global locks and their local
// users) and pg_cluster_ges_stats (the GES counters of this node): read from
// shared memory (instance/ges_shmem.hpp, ic/ges/node_cache.hpp), one
// partition lock at a time, copied out before any row is built.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(pgrac_ges_cache);
PG_FUNCTION_INFO_V1(pgrac_ges_stats);
}

#include <cstring>

#include "capi/ges/lock_client.hpp"
#include "ic/base/atomics.hpp"
#include "ic/ges/mode.hpp"
#include "ic/ges/node_cache.hpp"
#include "instance/ges_shmem.hpp"
#include "instance/guc.hpp"
#include "views/srf.hpp"

using namespace pgrac::ic::ges;
using namespace pgrac::glue;

Datum pgrac_ges_cache(PG_FUNCTION_ARGS) {
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    NodeCache* c = ges_node_cache();
    if (c == nullptr) PG_RETURN_VOID();
    const uint32_t per = c->entries_per_partition();
    CacheEntry* copy = static_cast<CacheEntry*>(palloc(sizeof(CacheEntry) * Max(per, 1u)));
    for (uint32_t part = 0; part < c->partitions(); part++) {
        uint32_t n = 0;
        ges_cache_lock(part);
        for (uint32_t i = 0; i < per; i++) {
            const CacheEntry* e = c->at(part * per + i);
            if (e != nullptr && e->state == kCacheCached) copy[n++] = *e;
        }
        ges_cache_unlock(part);
        for (uint32_t k = 0; k < n; k++) {
            const CacheEntry& e = copy[k];
            char name[80];
            ges_resource_text(e.resource, name, sizeof name);
            Datum v[10];
            bool nulls[10] = {false, false, false, false, false, false, false, false, false, false};
            v[0] = CStringGetTextDatum(name);
            v[1] = Int32GetDatum(static_cast<int32>(NodeCache::worker_of_partition(part)));
            v[2] = CStringGetTextDatum(lock_mode_name(static_cast<LockMode>(e.mode)));
            v[3] = Int64GetDatum(static_cast<int64>(cache_users(e)));
            if (e.bast != 0)
                v[4] = CStringGetTextDatum(lock_mode_name(static_cast<LockMode>(e.bast - 1)));
            else
                nulls[4] = true;
            v[5] = BoolGetDatum(e.converting != 0);
            v[6] = BoolGetDatum(e.waiting != 0);
            v[7] = counter_datum(e.grant_token);
            v[8] = Int64GetDatum(static_cast<int64>(e.token_end - e.next_token));
            v[9] = counter_datum(e.hits);
            tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, nulls);
        }
    }
    pfree(copy);
    PG_RETURN_VOID();
}

Datum pgrac_ges_stats(PG_FUNCTION_ARGS) {
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED), errmsg("record type expected")));
    desc = BlessTupleDesc(desc);
    GesShared* g = ges_shared();
    if (g == nullptr)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("pgrac_ic is not in shared_preload_libraries")));
    NodeCache* c = ges_node_cache();
    int64 cached = 0;
    for (uint32_t part = 0; c != nullptr && part < c->partitions(); part++) {
        ges_cache_lock(part);
        cached += c->used(part);
        ges_cache_unlock(part);
    }
    auto rd = [](uint64_t* p) { return counter_datum(pgrac::ic::load_relaxed(p)); };
    constexpr int kCols = 28;
    Datum v[kCols];
    bool nulls[kCols];
    memset(nulls, 0, sizeof nulls);
    int i = 0;
    v[i++] = Int64GetDatum(static_cast<int64>(c != nullptr ? c->capacity() : 0));
    v[i++] = Int64GetDatum(cached);
    v[i++] = rd(&g->cache_hits);
    v[i++] = rd(&g->cache_misses[static_cast<int>(CacheMiss::NotCached)]);
    v[i++] = rd(&g->cache_misses[static_cast<int>(CacheMiss::Fenced)]);
    v[i++] = rd(&g->cache_misses[static_cast<int>(CacheMiss::Bast)]);
    v[i++] = rd(&g->cache_misses[static_cast<int>(CacheMiss::ModeNotCovered)]);
    v[i++] = rd(&g->cache_misses[static_cast<int>(CacheMiss::LocalConflict)]);
    v[i++] = rd(&g->cache_misses[static_cast<int>(CacheMiss::RangeUsedUp)]);
    v[i++] = rd(&g->basts_received);
    v[i++] = rd(&g->cache_transfers);
    v[i++] = rd(&g->cache_give_backs);
    v[i++] = rd(&g->cache_evictions);
    v[i++] = rd(&g->cache_conversions);
    v[i++] = rd(&g->grants_delivered);
    v[i++] = rd(&g->denials_delivered);
    v[i++] = rd(&g->late_grants_undone);
    v[i++] = rd(&g->dead_owners_reaped);
    v[i++] = rd(&g->cluster_deadlocks);
    v[i++] = rd(&g->replay_conflicts);
    v[i++] = rd(&g->value_invalidations);
    v[i++] = rd(&g->remasters);
    v[i++] = rd(&g->remaster_timeouts);
    v[i++] = rd(&g->direct_sent);
    v[i++] = rd(&g->direct_taken);
    v[i++] = rd(&g->direct_served);
    v[i++] = rd(&g->direct_redirected);
    v[i++] = rd(&g->local_waits);
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, v, nulls)));
}
