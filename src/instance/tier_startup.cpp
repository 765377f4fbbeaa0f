extern "C" {
#include "postgres.h"
}

#include <cstring>
#include <string>

#include "instance/guc.hpp"
#include "instance/pg_boundary.hpp"
#include "instance/tier_startup.hpp"
#include "tiers/detect/rdma_checks.hpp"
#include "tiers/detect/rdma_detect.hpp"
#include "tiers/detect/tier_select.hpp"
#include "instance/verbs_glue.hpp"

using pgrac::tiers::Tier;

namespace pgrac::glue {

namespace {

// The decision, kept as plain data: it is made once in the postmaster and
// inherited by every child.
struct Decision {
    Tier active = Tier::Tier3;
    char reason[pgrac::ic::kDescMax];
    pgrac::ic::RdmaStatusShared rdma;
    bool fell_back = false;
    char fatal[512];
    char device[64];  // tier1/tier2: the RDMA device and port the verbs tier uses
    int port = 0;
};
Decision g_decision;

void copy(char* dst, size_t n, const std::string& s) {
    std::snprintf(dst, n, "%s", s.c_str());
}

void decide(Decision& d) {
    const Tier requested = static_cast<Tier>(pgrac_tier_requested);
    pgrac::tiers::SysRoots roots;
    pgrac::tiers::RdmaInventory inv = pgrac::tiers::scan_rdma(roots);
    pgrac::tiers::TierDecision td = pgrac::tiers::decide_tier(
        inv, pgrac::tiers::tier_name(requested), pgrac_interconnect_strict,
        pgrac_rdma_device ? pgrac_rdma_device : "");
    if (!td.ok) {
        copy(d.fatal, sizeof d.fatal, td.error);
        return;
    }
    d.active = td.tier;
    const std::string reason = td.reason;
    if (d.active == Tier::Tier1 || d.active == Tier::Tier2) {
        // The listener makes the verbs transport on this port (verbs_glue.cpp).
        copy(d.device, sizeof d.device, td.device);
        d.port = td.port;
    }
    copy(d.reason, sizeof d.reason, reason);
    // A WARNING when auto ends at TCP, or an explicit RDMA tier is not the one
    // that runs (tier1 asked on a RoCE port runs tier2).
    d.fell_back = (requested == Tier::Auto && d.active == Tier::Tier3) ||
                  ((requested == Tier::Tier1 || requested == Tier::Tier2) && d.active != requested);

    pgrac::tiers::VerifyOptions opts;
    opts.requested_tier = pgrac::tiers::tier_name(requested);
    opts.strict = pgrac_interconnect_strict;
    opts.device = pgrac_rdma_device ? pgrac_rdma_device : "";
    opts.query_pfc = false;
    std::string issues;
    for (const std::string& line : pgrac::tiers::quick_verify_issues(inv, roots, opts))
        issues += line + "\n";
    copy(d.rdma.verify_issues, sizeof d.rdma.verify_issues, issues);
    if (const pgrac::tiers::RdmaDevice* dev = pgrac::tiers::find_device(inv, td.device)) {
        copy(d.rdma.hca_name, sizeof d.rdma.hca_name, dev->name);
        copy(d.rdma.hca_vendor, sizeof d.rdma.hca_vendor, dev->vendor);
        d.rdma.numa_node = pgrac::tiers::effective_numa_node(inv, *dev);
        for (const pgrac::tiers::RdmaPort& p : dev->ports) {
            if (p.num != td.port) continue;
            copy(d.rdma.link_layer, sizeof d.rdma.link_layer,
                 pgrac::tiers::link_layer_name(p.link_layer));
            copy(d.rdma.port_state, sizeof d.rdma.port_state, p.state);
            d.rdma.mtu = p.active_mtu;
            copy(d.rdma.dcqcn, sizeof d.rdma.dcqcn, pgrac::tiers::dcqcn_state(p));
        }
    } else {
        d.rdma.numa_node = -1;
    }
}

}  // namespace

void select_tier() {
    Decision& d = g_decision;
    d = Decision{};
    d.rdma.numa_node = -1;
    char err[512] = "";
    const Tier requested = static_cast<Tier>(pgrac_tier_requested);
    if (requested == Tier::Stub || requested == Tier::Tier3) {
        d.active = requested;
        std::snprintf(d.reason, sizeof d.reason, "cluster.interconnect_tier = %s",
                      pgrac::tiers::tier_name(requested));
        return;
    }
    if (!guarded([&] { decide(d); }, err, sizeof err))
        std::snprintf(d.fatal, sizeof d.fatal, "RDMA detection failed: %s", err);
    if (d.fatal[0] != '\0')
        ereport(FATAL, (errcode(ERRCODE_CONFIG_FILE_ERROR),
                        errmsg("pgrac_ic cannot start at cluster.interconnect_tier = %s: %s",
                               pgrac::tiers::tier_name(requested), d.fatal),
                        errhint("Fix the RDMA setup (run \"pgrac_ctl verify rdma\"), or turn "
                                "cluster.interconnect_strict off to fall back to TCP.")));
    if (d.fell_back)
        ereport(WARNING, (errmsg("%s", d.reason),
                          errhint("Run \"pgrac_ctl verify rdma\" to see why no RDMA tier is "
                                  "usable.")));
}

void publish_tier(pgrac::ic::IcShared* shm) {
    shm->tier_requested = static_cast<uint32_t>(pgrac_tier_requested);
    shm->tier_active = static_cast<uint32_t>(g_decision.active);
    std::memcpy(shm->tier_reason, g_decision.reason, sizeof shm->tier_reason);
    shm->rdma = g_decision.rdma;
    if (g_decision.fell_back)
        shm->errors.add(pgrac::ic::ErrorType::TierFallback, pgrac::ic::Severity::Warning, 0,
                        pgrac::ic::unix_time_us(), g_decision.reason);
}

pgrac::tiers::TcpOptions tcp_options() {
    pgrac::tiers::TcpOptions o;
    o.max_payload = static_cast<uint32_t>(pgrac::ic::kMessageHeaderSize + PGRAC_IC_MAX_MESSAGE +
                                          pgrac::ic::kFrameTagSize);
    o.initial_max_payload = pgrac::ic::kMaxHandshakePayload;  // raised once authenticated
    return o;
}

pgrac::ic::TransportFactory transport_factory() {
    if (g_decision.active == Tier::Stub)
        return [](pgrac::ic::TransportHandler& h) { return pgrac::tiers::make_stub_transport(h); };
    if (g_decision.active == Tier::Tier1 || g_decision.active == Tier::Tier2)
        return [](pgrac::ic::TransportHandler& h) { return make_verbs_or_tcp(h); };
    return [](pgrac::ic::TransportHandler& h) {
        return pgrac::tiers::make_tcp_transport(h, tcp_options());
    };
}

Tier decided_tier() {
    return g_decision.active;
}
const char* decided_reason() {
    return g_decision.reason;
}
const char* decided_device() {
    return g_decision.device;
}
int decided_port() {
    return g_decision.port;
}

}  // namespace pgrac::glue
