// pg_cluster_ic_peers: every configured node as this instance sees it.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(pgrac_ic_peers);
}

#include <cstring>

#include "ic/base/atomics.hpp"
#include "ic/wire/frame_guard.hpp"
#include "instance/guc.hpp"
#include "instance/shmem.hpp"
#include "tiers/tier.hpp"
#include "capi/errors.hpp"
#include "views/srf.hpp"

using namespace pgrac::ic;
using pgrac::glue::counter_datum;
using pgrac::tiers::Tier;
using pgrac::tiers::tier_name;

Datum pgrac_ic_peers(PG_FUNCTION_ARGS) {
    constexpr int kColumns = 25;
    IcShared* shm = pgrac::glue::require_shared();
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    const char* tier = tier_name(static_cast<Tier>(shm->tier_active));
    for (const PeerShared& p : shm->peers) {
        if (p.node_id == 0) continue;
        const bool self = p.node_id == shm->my_node_id;
        Datum v[kColumns];
        bool n[kColumns];
        memset(n, 0, sizeof n);
        int i = 0;
        v[i++] = Int32GetDatum(static_cast<int32>(p.node_id));
        v[i++] = CStringGetTextDatum(p.address);
        v[i++] = BoolGetDatum(self);
        v[i++] =
            CStringGetTextDatum(peer_state_name(static_cast<PeerState>(load_relaxed(&p.state))));
        v[i++] = pgrac::glue::unix_us_to_timestamptz(load_relaxed(&p.state_since_us));
        v[i++] = CStringGetTextDatum(tier);
        v[i++] = Int32GetDatum(static_cast<int32>(self ? 0 : load_relaxed(&p.lanes_up)));
        v[i++] = Int32GetDatum(static_cast<int32>(self ? 0 : p.lanes_total));
        const uint64_t inc = load_relaxed(&p.incarnation);
        if (inc != 0)
            v[i] = Int64GetDatum(static_cast<int64>(inc));
        else
            n[i] = true;
        i++;
        v[i++] = Int64GetDatum(
            static_cast<int64>(self ? load_relaxed(&shm->epoch) : load_relaxed(&p.epoch_seen)));
        const uint64_t rtt = load_relaxed(&p.rtt_ns);
        if (!self && rtt != 0)
            v[i] = pgrac::glue::ns_to_us_datum(rtt);
        else
            n[i] = true;
        i++;
        v[i++] = counter_datum(load_relaxed(&p.queued_msgs));
        v[i++] = counter_datum(load_relaxed(&p.queued_bytes));
        v[i++] = counter_datum(load_relaxed(&p.unacked_msgs));
        const int64_t heard = load_relaxed(&p.last_heard_us);
        if (!self && heard != 0)
            v[i] = pgrac::glue::unix_us_to_timestamptz(heard);
        else
            n[i] = true;
        i++;
        v[i++] = counter_datum(load_relaxed(&p.notes_recv));
        const uint32_t prot = load_relaxed(&p.wire_protection);
        if (!self && prot != 0)
            v[i] = CStringGetTextDatum(wire_protection_name(static_cast<WireProtection>(prot - 1)));
        else
            n[i] = true;
        i++;
        v[i++] = counter_datum(load_relaxed(&p.session_resets));
        if (p.last_error[0] != '\0')
            v[i] = CStringGetTextDatum(p.last_error);
        else
            n[i] = true;
        i++;
        // Agreement: the instance that holds the id, the peer's timing (ours
        // on our own row), refusals for differing settings or a second instance.
        const uint64_t instance = self ? shm->membership.self_instance : load_relaxed(&p.instance);
        if (instance != 0)
            v[i] = Int64GetDatum(static_cast<int64>(instance));
        else
            n[i] = true;
        i++;
        const uint32_t timeout = self ? pgrac_peer_timeout_ms : load_relaxed(&p.peer_timeout_ms);
        const uint32_t beat =
            self ? pgrac_heartbeat_interval_ms : load_relaxed(&p.heartbeat_interval_ms);
        if (timeout != 0) {
            v[i++] = Int32GetDatum(static_cast<int32>(timeout));
            v[i++] = Int32GetDatum(static_cast<int32>(beat));
        } else {
            n[i++] = true;
            n[i++] = true;
        }
        char mismatch[sizeof p.config_mismatch];
        for (size_t b = 0; b < sizeof mismatch; b++)
            mismatch[b] = load_relaxed(&p.config_mismatch[b]);
        mismatch[sizeof mismatch - 1] = '\0';
        if (mismatch[0] != '\0')
            v[i] = CStringGetTextDatum(mismatch);
        else
            n[i] = true;
        i++;
        v[i++] = counter_datum(load_relaxed(&p.config_refusals));
        v[i++] = counter_datum(load_relaxed(&p.duplicate_refusals));
        Assert(i == kColumns);
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, n);
    }
    return (Datum)0;
}
