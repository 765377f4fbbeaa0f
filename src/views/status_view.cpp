// pg_cluster_rdma_status: one row, the tier that runs and why, and the RDMA
// device state where there is one.
extern "C" {
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(pgrac_ic_status_view);
}

#include <cstring>

#include "instance/guc.hpp"
#include "ic/base/atomics.hpp"
#include "instance/shmem.hpp"
#include "tiers/tier.hpp"
#include "capi/errors.hpp"
#include "views/srf.hpp"

using namespace pgrac::ic;
using pgrac::tiers::Tier;
using pgrac::tiers::tier_name;

namespace {

constexpr int kColumns = 27;

// NULL for an empty string: "not applicable / not known" reads better than ''.
void put_text(Datum* v, bool* n, int i, const char* s) {
    if (s == nullptr || s[0] == '\0')
        n[i] = true;
    else
        v[i] = CStringGetTextDatum(s);
}

// verify_issues is stored as lines; the view shows a text[].
Datum issues_array(const char* lines) {
    ArrayBuildState* st = initArrayResult(TEXTOID, CurrentMemoryContext, false);
    const char* p = lines;
    while (p && *p) {
        const char* e = strchr(p, '\n');
        size_t len = e ? static_cast<size_t>(e - p) : strlen(p);
        if (len > 0)
            st = accumArrayResult(st, PointerGetDatum(cstring_to_text_with_len(p, len)), false,
                                  TEXTOID, CurrentMemoryContext);
        p = e ? e + 1 : nullptr;
    }
    return makeArrayResult(st, CurrentMemoryContext);
}

}  // namespace

Datum pgrac_ic_status_view(PG_FUNCTION_ARGS) {
    IcShared* shm = pgrac::glue::require_shared();
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    Datum v[kColumns];
    bool n[kColumns];
    memset(n, 0, sizeof n);
    const RdmaStatusShared& r = shm->rdma;
    int i = 0;
    v[i++] = Int32GetDatum(static_cast<int32>(shm->my_node_id));
    v[i++] = CStringGetTextDatum(pgrac_cluster_name);
    v[i++] = CStringGetTextDatum(tier_name(static_cast<Tier>(shm->tier_active)));
    v[i++] = CStringGetTextDatum(tier_name(static_cast<Tier>(shm->tier_requested)));
    put_text(v, n, i++, shm->tier_reason);
    v[i++] = BoolGetDatum(pgrac_interconnect_strict);
    v[i++] = BoolGetDatum(load_acquire(&shm->listener_ready) != 0);
    v[i++] = Int64GetDatum(static_cast<int64>(load_relaxed(&shm->incarnation)));
    v[i++] = Int64GetDatum(static_cast<int64>(load_relaxed(&shm->epoch)));
    put_text(v, n, i++, r.hca_name);
    put_text(v, n, i++, r.hca_vendor);
    put_text(v, n, i++, r.link_layer);
    put_text(v, n, i++, r.port_state);
    if (r.mtu > 0)
        v[i] = Int32GetDatum(r.mtu);
    else
        n[i] = true;
    i++;
    put_text(v, n, i++, r.xrc);
    put_text(v, n, i++, r.dcqcn);
    put_text(v, n, i++, r.hugepage_size);
    if (r.numa_node >= 0)
        v[i] = Int32GetDatum(r.numa_node);
    else
        n[i] = true;
    i++;
    put_text(v, n, i++, r.numa_binding);
    if (r.cq_depth > 0)
        v[i] = Int32GetDatum(r.cq_depth);
    else
        n[i] = true;
    i++;
    v[i++] = issues_array(r.verify_issues);
    v[i++] = Int32GetDatum(static_cast<int32>(shm->n_lms));
    v[i++] = pgrac::glue::unix_us_to_timestamptz(shm->started_us);
    const ReplyPoolShared* pool = reply_pool(shm);
    v[i++] = Int64GetDatum(static_cast<int64>(pool->n_chunks) * kReplyChunkBytes);
    v[i++] = Int64GetDatum(static_cast<int64>(reply_pool_in_use(pool)) * kReplyChunkBytes);
    v[i++] = Int64GetDatum(static_cast<int64>(load_relaxed(&pool->peak_in_use)) * kReplyChunkBytes);
    v[i++] = Int64GetDatum(static_cast<int64>(load_relaxed(&pool->refusals)));
    Assert(i == kColumns);
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, n);
    return (Datum)0;
}
