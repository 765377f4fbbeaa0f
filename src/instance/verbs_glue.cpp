extern "C" {
#include "postgres.h"
}

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "instance/guc.hpp"
#include "ic/base/atomics.hpp"
#include "instance/pg_boundary.hpp"
#include "instance/tier_startup.hpp"
#include "instance/verbs_glue.hpp"

using pgrac::ic::IcShared;
using pgrac::tiers::Tier;

namespace pgrac::glue {

namespace {

// Listener-process state. Plain data: ereport() may run while it is in scope.
pgrac::ic::Transport* g_verbs = nullptr;  // owned by the engine, lives as long as it does
bool g_fell_back = false;
char g_fallback[pgrac::ic::kDescMax];  // why the verbs transport could not be made
pgrac::ic::TransportCounters g_last{};

template <size_t N>
void put(char (&dst)[N], const std::string& s) {
    std::snprintf(dst, N, "%s", s.c_str());
}

std::string page_size_text(uint64_t bytes) {
    if (bytes >= (1ull << 30)) return std::to_string(bytes >> 30) + "GB";
    if (bytes >= (1ull << 20)) return std::to_string(bytes >> 20) + "MB";
    return std::to_string(bytes >> 10) + "kB";
}

// VerbsStatus -> the status view's fields.
void fill_rdma(pgrac::ic::RdmaStatusShared& r, const pgrac::tiers::VerbsStatus& st) {
    put(r.hca_name, st.device);
    put(r.hca_vendor, st.vendor);
    put(r.link_layer, st.link_layer);
    if (st.active_mtu > 0) r.mtu = st.active_mtu;
    std::string xrc;
    if (st.xrc_in_use)
        xrc = "on";
    else if (!st.xrc_supported)
        xrc = "off: device has no XRC, using SRQ";
    else if (pgrac_rdma_use_xrc == 2)
        xrc = "off: disabled by setting, using SRQ";
    else
        xrc = "off: XRC path not built, using SRQ";
    put(r.xrc, xrc);
    std::string hp = st.hugepage_size > 4096
                         ? page_size_text(st.hugepage_size)
                         : "none (" + page_size_text(st.hugepage_size) + " pages)";
    if (!st.hugepage_warning.empty()) hp += ", fallback";
    put(r.hugepage_size, hp);
    r.numa_node = st.numa_node;
    std::string numa;
    if (st.numa_bound)
        numa = "bound to node " + std::to_string(st.numa_node);
    else if (!pgrac_rdma_numa_auto_bind)
        numa = "off by setting";
    else if (st.numa_node < 0)
        numa = "not bound: device has no NUMA node";
    else
        numa = st.numa_note.empty() ? "not bound" : st.numa_note;
    put(r.numa_binding, numa);
    r.cq_depth = st.cq_depth;
}

}  // namespace

pgrac::tiers::VerbsOptions verbs_options(const char* device, int port) {
    pgrac::tiers::VerbsOptions o;
    o.device = device ? device : "";
    if (port > 0) o.port = port;
    o.gid_index = pgrac_rdma_gid_index;
    o.cq_depth = pgrac_rdma_cq_depth;
    o.use_xrc = pgrac_rdma_use_xrc == 1   ? pgrac::tiers::XrcMode::kOn
                : pgrac_rdma_use_xrc == 2 ? pgrac::tiers::XrcMode::kOff
                                          : pgrac::tiers::XrcMode::kAuto;
    o.hugepage_size = pgrac_rdma_hugepage_size == 2   ? (1ull << 30)
                      : pgrac_rdma_hugepage_size == 1 ? (2ull << 20)
                                                      : 0;
    o.numa_bind = pgrac_rdma_numa_auto_bind;
    o.max_payload = kVerbsMaxPayload;
    o.initial_max_payload = ic::kMaxHandshakePayload;  // raised once authenticated
    return o;
}

std::unique_ptr<pgrac::ic::Transport> make_verbs_or_tcp(pgrac::ic::TransportHandler& h) {
    g_verbs = nullptr;
    g_fell_back = false;
    g_fallback[0] = '\0';
    g_last = pgrac::ic::TransportCounters{};
    const std::string dev = decided_device();
    const int port = decided_port();
    std::string err;
    pgrac::tiers::VerbsOptions o = verbs_options(dev.c_str(), port);
    // Replies served in place leave from registered buffers without a copy
    // (zero_copy_replies.hpp); nothing else is registered on the fly.
    o.zero_copy_min = kZeroCopyMin;
    o.zero_copy_registered_only = true;
    // Replies to requester lanes land in their process's slots (docs/rdma.md).
    o.write_min = static_cast<uint32_t>(pgrac_rdma_write_min);
    std::unique_ptr<pgrac::ic::Transport> t = pgrac::tiers::make_verbs_transport(h, o, &err);
    if (t && t->max_payload() < kVerbsMaxPayload) {
        err = "its frame limit " + std::to_string(t->max_payload()) + " is below the " +
              std::to_string(kVerbsMaxPayload) + " bytes a message may need";
        t.reset();
    }
    if (t) {
        g_verbs = t.get();
        return t;
    }
    const std::string where = "the verbs transport on " + dev + " port " + std::to_string(port);
    if (pgrac_interconnect_strict)
        throw std::runtime_error(
            where + " cannot be created: " + err + "; cluster.interconnect_strict is on, so " +
            pgrac::tiers::tier_name(decided_tier()) + " does not fall back to TCP");
    put(g_fallback, where + " cannot be created (" + err + "); running at Tier 3 (TCP)");
    g_fell_back = true;
    return pgrac::tiers::make_tcp_transport(h, tcp_options());
}

pgrac::ic::Transport* listener_verbs_transport() {
    return g_verbs;
}

void publish_transport(IcShared* shm) {
    char err[256] = "";
    char summary[512] = "";
    char pool_warning[256] = "";
    const Tier decided = decided_tier();
    if (decided != Tier::Tier1 && decided != Tier::Tier2) return;
    bool ok = guarded(
        [&] {
            pgrac::ic::RdmaStatusShared& r = shm->rdma;
            if (g_verbs == nullptr) {
                // Fell back to TCP: nothing of the verbs transport runs.
                r.xrc[0] = r.hugepage_size[0] = r.numa_binding[0] = '\0';
                r.cq_depth = 0;
                put(shm->tier_reason, g_fallback);
                pgrac::ic::store_release(&shm->tier_active, static_cast<uint32_t>(Tier::Tier3));
                return;
            }
            pgrac::tiers::VerbsStatus st;
            pgrac::tiers::verbs_transport_status(*g_verbs, &st);
            fill_rdma(r, st);
            put(shm->tier_reason, decided_reason());
            pgrac::ic::store_release(&shm->tier_active, static_cast<uint32_t>(decided));
            put(pool_warning, st.hugepage_warning);
            std::snprintf(summary, sizeof summary,
                          "%s port %d (%s, %s), MTU %d, CQ %d, SRQ %u, send depth %u, inline %u, "
                          "frames up to %u bytes, pool %zu bytes on %s pages, XRC: %s, NUMA: %s",
                          st.device.c_str(), st.port, st.link_layer.c_str(), st.tier.c_str(),
                          st.active_mtu, st.cq_depth, st.srq_depth, st.qp_send_depth, st.max_inline,
                          st.max_payload, st.pool_bytes, r.hugepage_size, r.xrc, r.numa_binding);
        },
        err, sizeof err);
    if (!ok) {
        ereport(WARNING, (errmsg("pgrac_ic: cannot publish the verbs status: %s", err)));
        return;
    }
    if (g_fell_back)
        ereport(WARNING, (errmsg("%s", g_fallback),
                          errhint("Run \"pgrac_ctl verify rdma\", or turn "
                                  "cluster.interconnect_strict on to make this an error.")));
    if (summary[0] != '\0') ereport(LOG, (errmsg("pgrac_ic verbs transport: %s", summary)));
    if (pool_warning[0] != '\0')
        ereport(WARNING, (errmsg("pgrac_ic verbs buffer pool: %s", pool_warning)));
}

void publish_transport_counters(IcShared* shm) noexcept {
    if (g_verbs == nullptr) return;
    char err[128];
    guarded(
        [&] {
            const pgrac::ic::TransportCounters c = g_verbs->counters();
            if (std::memcmp(&c, &g_last, sizeof c) == 0) return;
            using pgrac::ic::store_relaxed;
            store_relaxed(&shm->mr_cache_hits, c.mr_cache_hits);
            store_relaxed(&shm->mr_cache_misses, c.mr_cache_misses);
            store_relaxed(&shm->cq_overflows, c.cq_overflows);
            store_relaxed(&shm->qp_errors, c.qp_errors);
            store_relaxed(&shm->verbs_sends, c.verbs_sends);
            store_relaxed(&shm->verbs_recvs, c.verbs_recvs);
            store_relaxed(&shm->cq_rebuilds, c.cq_rebuilds);
            store_relaxed(&shm->rdma_writes, c.rdma_writes);
            store_relaxed(&shm->zero_copy_sends, c.zero_copy_sends);
            // New overflows and QP errors also go to the errors view.
            auto report = [&](pgrac::ic::ErrorType t, uint64_t now, uint64_t before,
                              const char* what) {
                if (now <= before) return;
                char text[128];
                std::snprintf(text, sizeof text, "%llu %s (%llu in all)",
                              static_cast<unsigned long long>(now - before), what,
                              static_cast<unsigned long long>(now));
                shm->errors.add(t, pgrac::ic::Severity::Warning, 0, pgrac::ic::unix_time_us(),
                                text);
            };
            report(pgrac::ic::ErrorType::CqOverflow, c.cq_overflows, g_last.cq_overflows,
                   "completion queue overflow(s), recovered by a rebuild");
            report(pgrac::ic::ErrorType::QpError, c.qp_errors, g_last.qp_errors,
                   "queue pair error(s): the connection was reset");
            if (c.cq_rebuilds != g_last.cq_rebuilds) {
                // The CQ was rebuilt (possibly deeper): refresh its depth.
                pgrac::tiers::VerbsStatus st;
                if (pgrac::tiers::verbs_transport_status(*g_verbs, &st))
                    store_relaxed(&shm->rdma.cq_depth, static_cast<int32_t>(st.cq_depth));
            }
            g_last = c;
        },
        err, sizeof err);
}

std::unique_ptr<ic::Transport> make_verbs_lane_transport(ic::TransportHandler& h,
                                                         int connect_timeout_ms,
                                                         std::string* error) {
    tiers::VerbsOptions o = verbs_options(decided_device(), decided_port());
    o.cq_depth = 16;
    o.use_xrc = tiers::XrcMode::kOff;
    o.hugepage_size = 0;
    o.numa_bind = false;
    o.send_slots = 2;
    o.recv_slots = 4;
    o.qp_send_depth = 4;
    o.mr_cache_entries = 1;
    o.zero_copy_min = 0;
    // The listener writes its replies into these (cluster.rdma_write_min):
    // the process has one RPC at a time, so two slots always have one free.
    o.landing_slots = 2;
    o.connect_timeout_ms = connect_timeout_ms;
    return tiers::make_verbs_transport(h, o, error);
}

}  // namespace pgrac::glue
