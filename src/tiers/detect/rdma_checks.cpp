#include "tiers/detect/rdma_checks.hpp"

#include <cstdio>
#include <exception>

#include "tiers/detect/rdma_live.hpp"

namespace pgrac::tiers {
namespace {

CheckResult make(const char* id, const char* name, CheckStatus s, std::string detail,
                 std::string action = "") {
    return CheckResult{id, name, s, std::move(detail), std::move(action)};
}

std::string port_summary(const RdmaPort& p) {
    std::string s = "port " + std::to_string(p.num) + " " + (p.state.empty() ? "?" : p.state) +
                    " " + link_layer_name(p.link_layer);
    if (!p.rate.empty()) s += " " + p.rate;
    return s;
}

std::string device_summary(const RdmaDevice& d) {
    std::string s = d.name + " (" + (d.driver.empty() ? "driver unknown" : d.driver);
    for (const RdmaPort& p : d.ports) s += ", " + port_summary(p);
    return s + ")";
}

bool has_active_port(const RdmaDevice& d) {
    for (const RdmaPort& p : d.ports)
        if (p.active()) return true;
    return false;
}

std::string hex4(uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%04x", v);
    return buf;
}

}  // namespace

const char* check_status_name(CheckStatus s) {
    switch (s) {
        case CheckStatus::kPass:
            return "PASS";
        case CheckStatus::kWarn:
            return "WARN";
        case CheckStatus::kFail:
            return "FAIL";
        default:
            return "SKIP";
    }
}

const RdmaDevice* select_device(const RdmaInventory& inv, const VerifyOptions& opts,
                                const TierDecision& decision) {
    if (!opts.device.empty()) return find_device(inv, opts.device);
    if (!decision.device.empty()) return find_device(inv, decision.device);
    for (const RdmaDevice& d : inv.devices)
        if (has_active_port(d)) return &d;
    return inv.devices.empty() ? nullptr : &inv.devices.front();
}

CheckResult check_hca(const RdmaInventory& inv, const VerifyOptions& opts, const RdmaDevice* dev) {
    const char* id = "hca";
    const char* name = "HCA presence";
    if (inv.devices.empty())
        return make(id, name, CheckStatus::kFail, "no RDMA device under /sys/class/infiniband",
                    "install the HCA and its RDMA driver (mlx5_core + mlx5_ib for ConnectX); "
                    "for tests, soft-RoCE: rdma link add rxe0 type rxe netdev <netdev>");
    std::string all;
    for (const RdmaDevice& d : inv.devices) all += (all.empty() ? "" : "; ") + device_summary(d);
    if (!opts.device.empty() && !dev)
        return make(id, name, CheckStatus::kFail,
                    "no RDMA device named " + opts.device + "; found " + all,
                    "pass one of the devices found to --device (or cluster.rdma_device)");
    for (const RdmaDevice& d : inv.devices)
        if ((opts.device.empty() || d.name == opts.device) && has_active_port(d))
            return make(id, name, CheckStatus::kPass, all);
    return make(id, name, CheckStatus::kFail, "no ACTIVE port: " + all,
                "check the cable and the switch port (ibstat / rdma link show); an InfiniBand port "
                "stuck in INIT needs a subnet manager (opensm or the switch's SM)");
}

CheckResult check_vendor(const RdmaDevice* dev) {
    const char* id = "vendor";
    const char* name = "vendor";
    if (!dev) return make(id, name, CheckStatus::kSkip, "no RDMA device");
    std::string ids;
    if (dev->vendor_id) {
        std::string vname = pci_vendor_name(dev->vendor_id);
        ids = (vname.empty() ? "" : vname + " ") + "PCI " + hex4(dev->vendor_id) + ":" +
              hex4(dev->device_id);
        if (!dev->hca_type.empty()) ids += " (" + dev->hca_type + ")";
    }
    std::string extra;
    if (!ids.empty()) extra += ", " + ids;
    if (dev->live_queried) extra += ", vendor part " + std::to_string(dev->vendor_part_id);
    if (!dev->fw_ver.empty()) extra += ", firmware " + dev->fw_ver;
    if (dev->xrc >= 0) extra += dev->xrc ? ", XRC supported" : ", no XRC (SRQ is used)";
    if (dev->vendor == "mlx5")
        return make(id, name, CheckStatus::kPass, "mlx5: " + dev->name + extra);
    if (dev->software) {
        std::string on = dev->parent_netdev.empty() ? "" : " on " + dev->parent_netdev;
        return make(
            id, name, CheckStatus::kWarn,
            "other: " + dev->name + " is " +
                (dev->driver == "siw" ? "soft-iWARP (siw)" : "soft-RoCE (rdma_rxe)") +
                ", a kernel software emulation" + on + extra,
            "fine for functional tests; use an RDMA HCA (ConnectX/mlx5) for production latency");
    }
    return make(id, name, CheckStatus::kPass,
                "other: " + dev->name + " (" + dev->driver + ")" + extra +
                    "; generic verbs path, mlx5-specific tuning not applied");
}

CheckResult check_driver(const RdmaInventory& inv, const RdmaDevice* dev) {
    const char* id = "driver";
    const char* name = "driver and rdma-core";
    if (!dev) return make(id, name, CheckStatus::kSkip, "no RDMA device");
    // What the process has mapped (the tree's proc/self/maps when recorded);
    // live, the loaded library's file name as a fallback.
    const std::string rdma_core =
        !inv.rdma_core.empty() ? inv.rdma_core : (inv.live ? rdma_core_version() : "");
    std::string detail =
        "kernel driver " + (dev->driver.empty() ? std::string("unknown") : dev->driver);
    detail +=
        dev->driver_version.empty() ? " (in-tree" : " " + dev->driver_version + " (out-of-tree";
    detail += inv.kernel_release.empty() ? ")" : ", kernel " + inv.kernel_release + ")";
    detail +=
        "; ib_uverbs ABI " + (inv.uverbs_abi >= 0 ? std::to_string(inv.uverbs_abi) : "unknown");
    detail += dev->uverbs.empty() ? ", no device node" : " (" + dev->uverbs + ")";
    detail += "; rdma-core " + (rdma_core.empty() ? std::string("unknown") : rdma_core);
    if (dev->uverbs.empty())
        return make(
            id, name, CheckStatus::kFail, detail,
            "load the user-verbs module: modprobe ib_uverbs (it creates /dev/infiniband/uverbsN)");
    if (dev->driver.empty() || rdma_core.empty())
        return make(id, name, CheckStatus::kWarn, detail,
                    "install rdma-core and ibverbs-providers; check the kernel driver with "
                    "`rdma dev show` and `ethtool -i <netdev>`");
    return make(id, name, CheckStatus::kPass, detail);
}

CheckResult check_tier(const TierDecision& d) {
    const char* id = "tier";
    const char* name = "tier";
    if (!d.ok)
        return make(
            id, name, CheckStatus::kFail, d.error,
            "fix the problems above, or set cluster.interconnect_strict = off to fall back");
    const std::string detail = std::string(tier_name(d.tier)) + ": " + d.reason;
    const bool rdma = d.tier == Tier::Tier1 || d.tier == Tier::Tier2;
    const bool asked = d.requested == "stub" || d.requested == "tier3";
    const bool exact = d.requested == "auto" || d.requested == tier_name(d.tier);
    if ((rdma && exact) || asked) return make(id, name, CheckStatus::kPass, detail);
    const std::string fix =
        d.requested == "auto"
            ? "no RDMA port is usable, so the instance runs TCP; fix the checks above"
            : "the instance would run below the " + d.requested +
                  " asked for; fix the checks above";
    return make(id, name, CheckStatus::kWarn, detail, fix);
}

std::vector<CheckResult> run_quick_checks(const RdmaInventory& inv, const SysRoots& roots,
                                          const VerifyOptions& opts) {
    std::vector<CheckResult> out;
    try {
        const TierDecision decision =
            decide_tier(inv, opts.requested_tier, opts.strict, opts.device);
        const RdmaDevice* dev = select_device(inv, opts, decision);
        out.push_back(check_hca(inv, opts, dev));
        out.push_back(check_vendor(dev));
        out.push_back(check_driver(inv, dev));
        out.push_back(check_hugepages(inv, opts.hugepage_size_kb));
        out.push_back(check_numa(inv, roots, dev));
        out.push_back(check_pfc_ecn(roots, dev, opts.query_pfc));
        out.push_back(check_tier(decision));
    } catch (const std::exception& e) {
        out.push_back(make("internal", "verify", CheckStatus::kFail, e.what()));
    }
    return out;
}

std::vector<std::string> quick_verify_issues(const RdmaInventory& inv, const SysRoots& roots,
                                             const VerifyOptions& opts) {
    std::vector<std::string> issues;
    try {
        for (const CheckResult& r : run_quick_checks(inv, roots, opts))
            if (r.status == CheckStatus::kWarn || r.status == CheckStatus::kFail)
                issues.push_back(r.id + ": " + check_status_name(r.status) + ": " + r.detail);
    } catch (const std::exception& e) {
        issues.push_back(std::string("internal: FAIL: ") + e.what());
    }
    return issues;
}

std::vector<std::string> quick_verify_issues(const SysRoots& roots, const VerifyOptions& opts) {
    return quick_verify_issues(scan_rdma(roots), roots, opts);
}

}  // namespace pgrac::tiers
