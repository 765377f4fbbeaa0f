// pg_cluster_rdma_counters: traffic, reliability and latency per peer, and a
// total row (peer_node_id NULL).
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(pgrac_ic_counters);
}

#include <cstring>
#include <initializer_list>

#include "ic/base/atomics.hpp"
#include "instance/shmem.hpp"
#include "tiers/tier.hpp"
#include "capi/errors.hpp"
#include "views/srf.hpp"

using namespace pgrac::ic;
using pgrac::glue::counter_datum;
using pgrac::tiers::Tier;

namespace {

constexpr int kColumns = 29;

struct Row {
    uint64_t msgs_sent, msgs_recv, bytes_sent, bytes_recv, rpcs_sent, rpcs_served, retransmits,
        reconnects, duplicates, stalls, queued_msgs, queued_bytes, served_in_place,
        in_place_handoffs, direct_rpcs_sent, direct_rpcs_served, requester_lanes, sealed_in_place;
};

Row read_row(const PeerShared& p) {
    return Row{load_relaxed(&p.msgs_sent),          load_relaxed(&p.msgs_recv),
               load_relaxed(&p.bytes_sent),         load_relaxed(&p.bytes_recv),
               load_relaxed(&p.rpcs_sent),          load_relaxed(&p.rpcs_served),
               load_relaxed(&p.retransmits),        load_relaxed(&p.reconnects),
               load_relaxed(&p.duplicates_dropped), load_relaxed(&p.backpressure_stalls),
               load_relaxed(&p.queued_msgs),        load_relaxed(&p.queued_bytes),
               load_relaxed(&p.served_in_place),    load_relaxed(&p.in_place_handoffs),
               load_relaxed(&p.direct_rpcs_sent),   load_relaxed(&p.direct_rpcs_served),
               load_relaxed(&p.requester_lanes),    load_relaxed(&p.sealed_in_place)};
}

void add(Row& t, const Row& r) {
    t.msgs_sent += r.msgs_sent;
    t.msgs_recv += r.msgs_recv;
    t.bytes_sent += r.bytes_sent;
    t.bytes_recv += r.bytes_recv;
    t.rpcs_sent += r.rpcs_sent;
    t.rpcs_served += r.rpcs_served;
    t.retransmits += r.retransmits;
    t.reconnects += r.reconnects;
    t.duplicates += r.duplicates;
    t.stalls += r.stalls;
    t.queued_msgs += r.queued_msgs;
    t.queued_bytes += r.queued_bytes;
    t.served_in_place += r.served_in_place;
    t.in_place_handoffs += r.in_place_handoffs;
    t.direct_rpcs_sent += r.direct_rpcs_sent;
    t.direct_rpcs_served += r.direct_rpcs_served;
    t.requester_lanes += r.requester_lanes;
    t.sealed_in_place += r.sealed_in_place;
}

void put_row(ReturnSetInfo* rsinfo, const IcShared* shm, int node, const Row& r,
             const LatencyHistogram& h, bool verbs) {
    Datum v[kColumns];
    bool n[kColumns];
    memset(n, 0, sizeof n);
    int i = 0;
    if (node > 0)
        v[i] = Int32GetDatum(node);
    else
        n[i] = true;
    i++;
    for (uint64_t c :
         {r.msgs_sent, r.msgs_recv, r.bytes_sent, r.bytes_recv, r.rpcs_sent, r.rpcs_served,
          r.retransmits, r.reconnects, r.duplicates, r.stalls, r.queued_msgs, r.queued_bytes})
        v[i++] = counter_datum(c);
    // MR cache and CQ counters exist only on the verbs tiers, transport-wide.
    const uint64_t hits = load_relaxed(&shm->mr_cache_hits);
    const uint64_t lookups = hits + load_relaxed(&shm->mr_cache_misses);
    if (verbs && node <= 0 && lookups > 0)
        v[i] = Float8GetDatum(static_cast<double>(hits) / static_cast<double>(lookups));
    else
        n[i] = true;
    i++;
    if (verbs && node <= 0)
        v[i] = counter_datum(load_relaxed(&shm->cq_overflows));
    else
        n[i] = true;
    i++;
    const uint64_t samples = h.total();
    for (double q : {0.5, 0.99, 0.999}) {
        if (samples > 0)
            v[i] = pgrac::glue::ns_to_us_datum(h.percentile(q));
        else
            n[i] = true;
        i++;
    }
    v[i++] = counter_datum(samples);
    // Frames the verbs transport moved (send and receive completions): proof
    // that the traffic went over RDMA, not a TCP fallback. Total row only.
    // Transport-wide counters of the verbs tiers: the total row only.
    auto verbs_total = [&](std::initializer_list<const uint64_t*> cs) {
        for (const uint64_t* c : cs) {
            if (verbs && node <= 0)
                v[i] = counter_datum(load_relaxed(c));
            else
                n[i] = true;
            i++;
        }
    };
    verbs_total({&shm->verbs_sends, &shm->verbs_recvs});
    // Requests from the peer the listener served where they arrived, and
    // those it handed to an LMS worker because serving would have waited.
    v[i++] = counter_datum(r.served_in_place);
    v[i++] = counter_datum(r.in_place_handoffs);
    // Requester lanes: RPCs our backends sent the peer on their own
    // connection, RPCs the peer's backends sent us that way, and those of the
    // peer's connections open now (docs/architecture.md).
    v[i++] = counter_datum(r.direct_rpcs_sent);
    v[i++] = counter_datum(r.direct_rpcs_served);
    v[i++] = counter_datum(r.requester_lanes);
    // Replies written into requester lanes' landing slots, and frames sent
    // without a copy into a send slot (docs/rdma.md).
    verbs_total({&shm->rdma_writes, &shm->zero_copy_sends});
    // Replies to the peer sealed while they were written: the cipher read the
    // block in the buffer pool, with no copy before it (docs/rdma.md).
    v[i++] = counter_datum(r.sealed_in_place);
    Assert(i == kColumns);
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, n);
}

}  // namespace

Datum pgrac_ic_counters(PG_FUNCTION_ARGS) {
    IcShared* shm = pgrac::glue::require_shared();
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    const Tier tier = static_cast<Tier>(shm->tier_active);
    const bool verbs = tier == Tier::Tier1 || tier == Tier::Tier2;
    Row total{};
    for (const PeerShared& p : shm->peers) {
        if (p.node_id == 0) continue;
        Row r = read_row(p);
        add(total, r);
        put_row(rsinfo, shm, static_cast<int>(p.node_id), r, p.rpc_latency, verbs);
    }
    put_row(rsinfo, shm, 0, total, shm->total_latency, verbs);
    return (Datum)0;
}
