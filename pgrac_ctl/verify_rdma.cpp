#include "verify_rdma.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "table.hpp"
#include "tiers/detect/rdma_live.hpp"

namespace pgrac::ctl {
namespace {

using tiers::CheckResult;
using tiers::CheckStatus;

std::string fixed(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
    return buf;
}

std::string size_label(size_t bytes) {
    return bytes >= 1024 && bytes % 1024 == 0 ? std::to_string(bytes / 1024) + " KiB"
                                              : std::to_string(bytes) + " B";
}

// The loopback check: real verbs on the live device, or why not.
CheckResult loopback_check(VerifyReport& r, const VerifyCmd& cmd) {
    CheckResult c{"loopback", "loopback test", CheckStatus::kSkip, "", ""};
    const tiers::RdmaDevice* dev = tiers::find_device(r.inv, r.device);
    if (!dev) {
        c.detail = "no RDMA device";
        return c;
    }
    if (!r.roots.live()) {
        c.detail = "--sysfs-root/--procfs-root point to a recorded tree: no device to run verbs on";
        return c;
    }
    std::string err;
    const auto names = tiers::verbs_device_names(&err);
    if (std::find(names.begin(), names.end(), dev->name) == names.end()) {
        c.status = CheckStatus::kFail;
        c.detail = "libibverbs lists no device " + dev->name +
                   (err.empty() ? "" : " (" + err + ")") + ": no user-space provider for driver " +
                   dev->driver;
        c.action =
            "install rdma-core's providers (Debian: ibverbs-providers) and check `ibv_devices`";
        return c;
    }
    const tiers::TierDecision d = tiers::decide_tier(r.inv, "auto", false, dev->name);
    if (d.tier != tiers::Tier::Tier1 && d.tier != tiers::Tier::Tier2) {
        c.detail = "no usable port on " + dev->name + ": " + d.reason;
        return c;
    }
    LoopbackOptions& o = r.loopback_opts;
    o.device = dev->name;
    o.port = d.port;
    o.gid_index = d.tier == tiers::Tier::Tier2 ? d.gid_index : -1;
    o.lat_iters = cmd.iters;
    o.bw_iters = cmd.bw_iters;
    const LoopbackResult lb = run_loopback(o);
    r.loopback = lb;
    std::string where =
        "RC QP loopback on " + dev->name + " port " + std::to_string(o.port) +
        (o.gid_index >= 0 ? " (GID " + std::to_string(o.gid_index) + ")" : " (LID)");
    if (!lb.ok) {
        c.status = CheckStatus::kFail;
        c.detail = where + ": " + lb.error;
        c.action =
            "check dmesg, `ibv_devinfo -d " + dev->name +
            "`, the locked-memory limit (ulimit -l) and that ibv_rc_pingpong works on this port";
        return c;
    }
    c.status = CheckStatus::kPass;
    c.detail = where + ", MTU " + std::to_string(lb.path_mtu) + ": " + std::to_string(o.lat_iters) +
               " x " + size_label(o.lat_size) + " ping-pong " + fixed(lb.lat_us_per_iter, 2) +
               " µs/iter (round trip); " + std::to_string(o.bw_iters) + " x " +
               size_label(o.bw_size) + " stream " + fixed(lb.bw_mb_per_s, 1) + " MB/s";
    return c;
}

nlohmann::ordered_json device_json(const tiers::RdmaDevice& d) {
    nlohmann::ordered_json ports = nlohmann::ordered_json::array();
    for (const tiers::RdmaPort& p : d.ports) {
        nlohmann::ordered_json jp = {
            {"port", p.num},
            {"state", p.state},
            {"state_code", p.state_code},
            {"phys_state", p.phys_state},
            {"link_layer", tiers::link_layer_name(p.link_layer)},
            {"rate", p.rate},
            {"active_mtu",
             p.active_mtu > 0 ? nlohmann::ordered_json(p.active_mtu) : nlohmann::ordered_json()},
            {"lid", p.lid}};
        if (p.link_layer == tiers::LinkLayer::kEthernet) {
            jp["gid_index"] = p.roce_gid.index >= 0 ? nlohmann::ordered_json(p.roce_gid.index)
                                                    : nlohmann::ordered_json();
            jp["gid"] = p.roce_gid.gid;
            jp["gid_type"] = p.roce_gid.type;
            jp["netdev"] = p.roce_gid.netdev;
            jp["dcqcn"] = tiers::dcqcn_state(p);
        }
        ports.push_back(jp);
    }
    return {{"name", d.name},
            {"vendor", d.vendor},
            {"driver", d.driver},
            {"driver_version", d.driver_version},
            {"software", d.software},
            {"node_type", d.node_type},
            {"pci_address", d.pci_address},
            {"pci_vendor_id", d.vendor_id},
            {"pci_device_id", d.device_id},
            {"hca_type", d.hca_type},
            {"fw_ver", d.fw_ver},
            {"numa_node", d.numa_node},
            {"irqs", d.irqs},
            {"uverbs", d.uverbs},
            {"xrc", d.xrc < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(d.xrc == 1)},
            {"vendor_part_id",
             d.live_queried ? nlohmann::ordered_json(d.vendor_part_id) : nlohmann::ordered_json()},
            {"ports", ports}};
}

}  // namespace

VerifyReport run_verify(const tiers::SysRoots& roots, const VerifyCmd& cmd) {
    VerifyReport r;
    r.roots = roots;
    r.inv = tiers::scan_rdma(roots);
    if (roots.live())  // active MTU, XRC, part id: only verbs know them
        for (tiers::RdmaDevice& d : r.inv.devices)
            tiers::apply_live_info(d, tiers::query_device_live(d.name));
    tiers::VerifyOptions opts;
    opts.device = cmd.device;
    opts.requested_tier = cmd.tier;
    opts.strict = cmd.strict;
    r.decision = tiers::decide_tier(r.inv, opts.requested_tier, opts.strict, opts.device);
    if (const tiers::RdmaDevice* dev = tiers::select_device(r.inv, opts, r.decision))
        r.device = dev->name;
    r.checks = tiers::run_quick_checks(r.inv, roots, opts);
    auto tier_it = std::find_if(r.checks.begin(), r.checks.end(),
                                [](const CheckResult& c) { return c.id == "tier"; });
    tier_it = r.checks.insert(
        tier_it,
        memlock_check(roots, cmd.memlock, r.decision.ok ? tiers::tier_name(r.decision.tier) : ""));
    r.checks.insert(tier_it + 1, loopback_check(r, cmd));
    for (const CheckResult& c : r.checks)
        if (c.status == CheckStatus::kFail) r.exit_code = 1;
    return r;
}

nlohmann::ordered_json verify_json(const VerifyReport& r) {
    nlohmann::ordered_json checks = nlohmann::ordered_json::array();
    std::map<std::string, int> counts{{"PASS", 0}, {"WARN", 0}, {"FAIL", 0}, {"SKIP", 0}};
    for (const CheckResult& c : r.checks) {
        checks.push_back({{"id", c.id},
                          {"check", c.name},
                          {"result", tiers::check_status_name(c.status)},
                          {"detail", c.detail},
                          {"action", c.action}});
        ++counts[tiers::check_status_name(c.status)];
    }
    const tiers::RdmaDevice* dev = tiers::find_device(r.inv, r.device);
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const tiers::RdmaDevice& d : r.inv.devices) devices.push_back(device_json(d));
    nlohmann::ordered_json hugepages = nlohmann::ordered_json::array();
    for (const tiers::HugepagePool& p : r.inv.hugepages)
        hugepages.push_back(
            {{"size_kb", p.size_kb}, {"present", p.present}, {"nr", p.nr}, {"free", p.free}});
    nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
    for (const tiers::NumaNode& n : r.inv.numa_nodes)
        nodes.push_back({{"node", n.id}, {"cpulist", n.cpulist}});
    nlohmann::ordered_json loopback;  // null unless it ran
    if (r.loopback) {
        const LoopbackResult& l = *r.loopback;
        loopback = {{"ok", l.ok},
                    {"error", l.error},
                    {"device", r.loopback_opts.device},
                    {"port", r.loopback_opts.port},
                    {"gid_index", r.loopback_opts.gid_index},
                    {"path_mtu", l.path_mtu},
                    {"latency_iters", r.loopback_opts.lat_iters},
                    {"latency_size", r.loopback_opts.lat_size},
                    {"latency_us_per_iter", l.lat_us_per_iter},
                    {"bandwidth_iters", r.loopback_opts.bw_iters},
                    {"bandwidth_size", r.loopback_opts.bw_size},
                    {"bandwidth_mb_per_s", l.bw_mb_per_s},
                    {"seconds", l.seconds}};
    }
    return {{"command", "verify rdma"},
            {"sysfs_root", r.roots.sysfs},
            {"procfs_root", r.roots.procfs},
            {"live", r.roots.live()},
            {"device", dev ? nlohmann::ordered_json(dev->name) : nlohmann::ordered_json()},
            {"vendor", dev ? nlohmann::ordered_json(dev->vendor) : nlohmann::ordered_json()},
            {"tier", r.decision.ok ? nlohmann::ordered_json(tiers::tier_name(r.decision.tier))
                                   : nlohmann::ordered_json()},
            {"tier_requested", r.decision.requested},
            {"tier_reason", r.decision.reason},
            {"checks", checks},
            {"loopback", loopback},
            {"devices", devices},
            {"hugepages", hugepages},
            {"numa_nodes", nodes},
            {"kernel_release", r.inv.kernel_release},
            {"rdma_core",
             r.inv.rdma_core.empty() && r.inv.live ? tiers::rdma_core_version() : r.inv.rdma_core},
            {"uverbs_abi", r.inv.uverbs_abi},
            {"scan_errors", r.inv.errors},
            {"summary",
             {{"pass", counts["PASS"]},
              {"warn", counts["WARN"]},
              {"fail", counts["FAIL"]},
              {"skip", counts["SKIP"]}}},
            {"exit_code", r.exit_code}};
}

void print_verify_table(std::ostream& out, const VerifyReport& r) {
    out << "pgrac_ctl verify rdma (sysfs " << r.roots.sysfs << ", procfs " << r.roots.procfs
        << ")\n\n";
    Table t({"CHECK", "RESULT", "DETAIL / WHAT TO DO"});
    int fails = 0, warns = 0;
    for (const CheckResult& c : r.checks) {
        t.add_row({c.name, tiers::check_status_name(c.status), c.detail});
        if (!c.action.empty()) t.add_row({"", "", "-> " + c.action});
        fails += c.status == CheckStatus::kFail;
        warns += c.status == CheckStatus::kWarn;
    }
    t.print(out);
    out << '\n' << fails << " failed, " << warns << " warning" << (warns == 1 ? "" : "s") << "; ";
    if (r.decision.ok)
        out << "an instance started now would run at " << tiers::tier_name(r.decision.tier)
            << ".\n";
    else
        out << "an instance started now would refuse to start: " << r.decision.error << "\n";
}

int cmd_verify_rdma(const tiers::SysRoots& roots, const VerifyCmd& cmd, std::ostream& out) {
    const VerifyReport r = run_verify(roots, cmd);
    if (cmd.json)
        out << verify_json(r).dump(2) << '\n';
    else
        print_verify_table(out, r);
    return r.exit_code;
}

}  // namespace pgrac::ctl
