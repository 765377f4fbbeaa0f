// pg_cluster_membership and pg_cluster_membership_history: this node's
// standing in the cluster (ic/membership/membership.hpp), read from shared memory.
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(pgrac_membership);
PG_FUNCTION_INFO_V1(pgrac_membership_history);
}

#include <algorithm>
#include <cstring>

#include "ic/base/atomics.hpp"
#include "ic/membership/membership.hpp"
#include "instance/guc.hpp"
#include "instance/shmem.hpp"
#include "capi/errors.hpp"
#include "views/srf.hpp"

using namespace pgrac::ic;

namespace {

// int[] of the node ids in a mask (palloc'd).
Datum members_array(NodeMask m) {
    Datum ids[64];
    int n = 0;
    for (int id = 1; id <= 64; id++)
        if (has_node(m, static_cast<uint16_t>(id))) ids[n++] = Int32GetDatum(id);
    return PointerGetDatum(construct_array(ids, n, INT4OID, sizeof(int32), true, TYPALIGN_INT));
}

}  // namespace

Datum pgrac_membership(PG_FUNCTION_ARGS) {
    constexpr int kColumns = 16;
    IcShared* shm = pgrac::glue::require_shared();
    MembershipShared* ms = &shm->membership;
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        ereport(ERROR, (errmsg("return type must be a row type")));
    const uint64_t now_ms = lease_now_ms(ms);
    const View v = committed_view(ms);
    const uint64_t w = lease_word(ms);
    const bool valid = lease_valid(w, now_ms);
    int configured = 0;
    for (const PeerShared& p : shm->peers) configured += p.node_id != 0 ? 1 : 0;
    Datum d[kColumns];
    bool n[kColumns];
    memset(n, 0, sizeof n);
    int i = 0;
    d[i++] = Int32GetDatum(static_cast<int32>(shm->my_node_id));
    d[i++] =
        CStringGetTextDatum(member_state_name(static_cast<MemberState>(load_acquire(&ms->state))));
    d[i++] = Int64GetDatum(static_cast<int64>(v.epoch));
    d[i++] = members_array(v.members);
    d[i++] = BoolGetDatum(valid);
    if (lease_expiry_ms(w) == kLeaseForever) {
        n[i] = true;  // one-node cluster: the lease never ends
        d[i++] = Int64GetDatum(0);
    } else {
        d[i++] = Int64GetDatum(valid ? static_cast<int64>(lease_expiry_ms(w) - now_ms) : 0);
    }
    d[i++] = Int64GetDatum(static_cast<int64>(lease_fences(w)));
    d[i++] = Int64GetDatum(static_cast<int64>(load_acquire(&ms->accepted.epoch)));
    d[i++] = members_array(load_acquire(&ms->accepted.members));
    d[i++] = Int32GetDatum(configured / 2 + 1);
    d[i++] = pgrac::glue::counter_datum(load_relaxed(&ms->stale_epoch_messages));
    d[i++] = pgrac::glue::counter_datum(load_relaxed(&ms->bump_requests));
    d[i++] = Int64GetDatum(static_cast<int64>(ms->self_instance));
    d[i++] = Int32GetDatum(static_cast<int32>(load_relaxed(&ms->lease_ms)));
    // The window after which this node votes a silent node out: peer_timeout,
    // or the old value for a while after it was lowered (ic/membership/membership.hpp).
    uint32_t window = static_cast<uint32_t>(pgrac_peer_timeout_ms);
    if (now_ms < load_relaxed(&ms->window_floor_until_ms))
        window = std::max(window, load_relaxed(&ms->window_floor_ms));
    d[i++] = Int32GetDatum(static_cast<int32>(window));
    d[i++] = pgrac::glue::counter_datum(load_relaxed(&ms->future_epoch_messages));
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), d, n)));
}

Datum pgrac_membership_history(PG_FUNCTION_ARGS) {
    constexpr int kColumns = 5;
    IcShared* shm = pgrac::glue::require_shared();
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    MembershipRecord* recs =
        static_cast<MembershipRecord*>(palloc(sizeof(MembershipRecord) * kHistoryLen));
    const size_t count = membership_history(&shm->membership, recs, kHistoryLen);
    for (size_t k = 0; k < count; k++) {
        const MembershipRecord& r = recs[k];
        Datum d[kColumns];
        bool n[kColumns];
        memset(n, 0, sizeof n);
        d[0] = pgrac::glue::unix_us_to_timestamptz(r.at_us);
        d[1] = Int64GetDatum(static_cast<int64>(r.epoch));
        d[2] = CStringGetTextDatum(membership_event_name(static_cast<MembershipEvent>(r.event)));
        d[3] = members_array(r.members);
        d[4] = CStringGetTextDatum(r.detail);
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, d, n);
    }
    return (Datum)0;
}
