// Which tier runs, given what detection found and what was asked for
// (cluster.interconnect_tier, cluster.interconnect_strict).
#pragma once

#include <string>

#include "tiers/detect/rdma_detect.hpp"
#include "tiers/tier.hpp"

namespace pgrac::tiers {

struct TierDecision {
    bool ok = true;  // false: the start must fail (strict, or a bad request); see error
    Tier tier = Tier::Tier3;
    std::string requested;  // auto, stub, tier1, tier2, tier3
    std::string reason;     // one sentence: why this tier
    std::string error;      // set when !ok
    // The port the verbs tier should use (tier1/tier2 only).
    std::string device;
    int port = 0;
    LinkLayer link_layer = LinkLayer::kUnknown;
    int gid_index = -1;  // RoCE v2 GID (tier2)
};

// requested: auto | stub | tier1 | tier2 | tier3. device: restrict to this
// RDMA device ("" = any). tier1 needs an ACTIVE InfiniBand port, tier2 an
// ACTIVE Ethernet port with a RoCE v2 GID; auto prefers tier1. When the
// wanted RDMA tier cannot run, the best remaining tier runs (TCP if no
// port is usable) unless strict, which makes it an error instead.
TierDecision decide_tier(const RdmaInventory& inv, const std::string& requested, bool strict,
                         const std::string& device = "");

}  // namespace pgrac::tiers
