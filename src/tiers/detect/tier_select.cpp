#include "tiers/detect/tier_select.hpp"

#include <exception>
#include <vector>

namespace pgrac::tiers {
namespace {

struct Candidate {
    const RdmaDevice* dev = nullptr;
    const RdmaPort* port = nullptr;
    Tier tier = Tier::Tier3;
};

std::string port_label(const RdmaDevice& d, const RdmaPort& p) {
    return d.name + " port " + std::to_string(p.num);
}

// Empty when the port can carry the verbs tier, else why not.
std::string port_problem(const RdmaDevice& d, const RdmaPort& p) {
    const std::string label = port_label(d, p);
    if (d.node_type == "RNIC") return label + " is iWARP, which the verbs tier does not support";
    if (!p.active()) {
        std::string s = label + " is " + (p.state.empty() ? "in an unknown state" : p.state);
        if (p.state_code == 2 && p.link_layer == LinkLayer::kInfiniBand)
            s += " (no subnet manager has configured it)";
        return s;
    }
    if (d.uverbs.empty())
        return d.name + " has no ib_uverbs device node (module ib_uverbs not loaded)";
    if (p.link_layer == LinkLayer::kInfiniBand) return "";
    if (p.link_layer != LinkLayer::kEthernet) return label + " has an unknown link layer";
    if (p.roce_gid.index < 0 || p.roce_gid.type != "RoCE v2")
        return label + " has no RoCE v2 GID (its netdev needs an IP address)";
    return "";
}

std::string describe(const Candidate& c) {
    std::string s = port_label(*c.dev, *c.port) + " is an ACTIVE " +
                    link_layer_name(c.port->link_layer) + " port";
    if (c.tier == Tier::Tier2) s += " (RoCE v2 GID " + std::to_string(c.port->roce_gid.index) + ")";
    return s;
}

const char* tier_label(Tier t) {
    switch (t) {
        case Tier::Tier1:
            return "Tier 1 (InfiniBand verbs)";
        case Tier::Tier2:
            return "Tier 2 (RoCE verbs)";
        case Tier::Tier3:
            return "Tier 3 (TCP)";
        default:
            return "stub (no network)";
    }
}

void take(TierDecision& d, const Candidate& c) {
    d.tier = c.tier;
    d.device = c.dev->name;
    d.port = c.port->num;
    d.link_layer = c.port->link_layer;
    d.gid_index = c.tier == Tier::Tier2 ? c.port->roce_gid.index : -1;
}

TierDecision decide(const RdmaInventory& inv, const std::string& requested, bool strict,
                    const std::string& device) {
    TierDecision d;
    d.requested = requested;
    if (requested == "stub" || requested == "tier3") {
        d.tier = requested == "stub" ? Tier::Stub : Tier::Tier3;
        d.reason = std::string(tier_label(d.tier)) + " was requested";
        return d;
    }
    if (requested != "auto" && requested != "tier1" && requested != "tier2") {
        d.ok = false;
        d.error = "unknown interconnect tier '" + requested + "' (auto, stub, tier1, tier2, tier3)";
        d.reason = d.error;
        return d;
    }

    // Collect usable ports (first tier1, first tier2) and why the rest are not.
    std::vector<std::string> problems;
    Candidate best1, best2;
    bool device_found = device.empty();
    for (const RdmaDevice& dev : inv.devices) {
        if (!device.empty() && dev.name != device) continue;
        device_found = true;
        if (dev.ports.empty()) problems.push_back(dev.name + " has no ports");
        for (const RdmaPort& p : dev.ports) {
            std::string why = port_problem(dev, p);
            if (!why.empty()) {
                problems.push_back(why);
                continue;
            }
            Candidate c{&dev, &p,
                        p.link_layer == LinkLayer::kInfiniBand ? Tier::Tier1 : Tier::Tier2};
            Candidate& slot = c.tier == Tier::Tier1 ? best1 : best2;
            if (!slot.dev) slot = c;
        }
    }

    std::string missing;  // why the wanted tier cannot run
    if (inv.devices.empty()) {
        missing = "No RDMA HCA detected";
    } else if (!device_found) {
        missing = "RDMA device " + device + " not found";
    } else if (!best1.dev && !best2.dev) {
        std::string joined;
        for (const std::string& p : problems) joined += (joined.empty() ? "" : "; ") + p;
        missing = "No usable RDMA port (" + joined + ")";
    } else if (requested == "tier1" && !best1.dev) {
        missing = "tier1 requested but no ACTIVE InfiniBand port (" + describe(best2) + ")";
    } else if (requested == "tier2" && !best2.dev) {
        missing = "tier2 requested but no ACTIVE RoCE port (" + describe(best1) + ")";
    }

    if (missing.empty()) {
        const Candidate& c = requested == "tier2" ? best2 : (best1.dev ? best1 : best2);
        take(d, c);
        d.reason = describe(c) + "; running at " + tier_label(c.tier);
        return d;
    }
    if (strict) {
        d.ok = false;
        d.error = missing + "; cluster.interconnect_strict is on, so " + requested +
                  " does not fall back";
        d.reason = d.error;
        return d;
    }
    // Fallback: another RDMA port if there is one, else TCP.
    const Candidate& c = best1.dev ? best1 : best2;
    if (c.dev) {
        take(d, c);
        d.reason = missing + "; running at " + tier_label(c.tier);
    } else {
        d.tier = Tier::Tier3;
        d.reason = missing + "; running at " + tier_label(Tier::Tier3);
    }
    return d;
}

}  // namespace

TierDecision decide_tier(const RdmaInventory& inv, const std::string& requested, bool strict,
                         const std::string& device) {
    try {
        return decide(inv, requested, strict, device);
    } catch (const std::exception& e) {
        TierDecision d;
        d.ok = false;
        d.error = std::string("tier decision failed: ") + e.what();
        d.reason = d.error;
        return d;
    }
}

}  // namespace pgrac::tiers
