// The host-side checks of verify rdma: hugepages, NUMA/IRQ placement, PFC/ECN.
#include <algorithm>

#include "tiers/detect/dcb_pfc.hpp"
#include "tiers/detect/rdma_checks.hpp"

namespace pgrac::tiers {
namespace {

CheckResult make(const char* id, const char* name, CheckStatus s, std::string detail,
                 std::string action = "") {
    return CheckResult{id, name, s, std::move(detail), std::move(action)};
}

std::string pool_label(uint64_t kb) {
    return kb >= 1048576 ? "1 GB" : "2 MB";
}

bool subset(const std::vector<int>& a, const std::vector<int>& b) {
    return std::includes(b.begin(), b.end(), a.begin(), a.end());
}

bool intersects(const std::vector<int>& a, const std::vector<int>& b) {
    for (int x : a)
        if (std::binary_search(b.begin(), b.end(), x)) return true;
    return false;
}

const RdmaPort* roce_port(const RdmaDevice& dev) {
    const RdmaPort* found = nullptr;
    for (const RdmaPort& p : dev.ports) {
        if (p.link_layer != LinkLayer::kEthernet) continue;
        if (!found || (p.active() && !found->active())) found = &p;
    }
    return found;
}

}  // namespace

CheckResult check_hugepages(const RdmaInventory& inv, uint64_t want_kb) {
    const char* id = "hugepages";
    const char* name = "hugepages";
    std::string detail;
    bool any_free = false, any_configured = false, any_present = false;
    for (const HugepagePool& p : inv.hugepages) {
        if (!detail.empty()) detail += "; ";
        detail += pool_label(p.size_kb) + ": ";
        if (!p.present)
            detail += "not offered by the kernel";
        else if (p.nr == 0)
            detail += "none configured";
        else
            detail += std::to_string(p.nr) + " configured, " + std::to_string(p.free) + " free";
        if (want_kb && p.size_kb != want_kb) continue;
        any_present |= p.present;
        any_configured |= p.nr > 0;
        any_free |= p.free > 0;
    }
    const std::string wanted = want_kb ? pool_label(want_kb) + " " : "";
    const std::string fix =
        "reserve hugepages: echo 1024 > /proc/sys/vm/nr_hugepages (2 MB pages, 2 GiB), or boot "
        "with hugepagesz=1G hugepages=N; then restart the instance";
    if (any_free) return make(id, name, CheckStatus::kPass, detail);
    if (!any_present)
        return make(
            id, name, CheckStatus::kWarn, detail + "; the kernel offers no " + wanted + "hugepages",
            "use a kernel with CONFIG_HUGETLBFS; until then the verbs tier uses 4 KiB pages");
    if (any_configured)
        return make(
            id, name, CheckStatus::kWarn, detail + "; all " + wanted + "hugepages are in use",
            "raise vm.nr_hugepages (or the 1 GB pool) so the verbs tier's buffer pool fits");
    return make(
        id, name, CheckStatus::kWarn,
        detail + "; the verbs tier falls back to 4 KiB pages (slower registration, TLB misses)",
        fix);
}

CheckResult check_numa(const RdmaInventory& inv, const SysRoots& roots, const RdmaDevice* dev) {
    const char* id = "numa";
    const char* name = "NUMA and IRQ affinity";
    if (!dev) return make(id, name, CheckStatus::kSkip, "no RDMA device");
    if (dev->software)
        return make(
            id, name, CheckStatus::kSkip,
            dev->name + " is a software device: no PCI function, no IRQs of its own to place");
    const int node = effective_numa_node(inv, *dev);
    const NumaNode* n = find_numa_node(inv, node);
    if (!n) {
        if (inv.numa_nodes.empty())
            return make(id, name, CheckStatus::kWarn, "the kernel shows no NUMA nodes",
                        "check /sys/devices/system/node (CONFIG_NUMA)");
        return make(
            id, name, CheckStatus::kWarn,
            dev->name + " reports no NUMA node on a machine with " +
                std::to_string(inv.numa_nodes.size()) + " nodes",
            "enable ACPI SRAT/NUMA in the BIOS so the kernel knows where the HCA is attached");
    }
    std::string where =
        dev->name + " is on node " + std::to_string(n->id) + " (CPUs " + n->cpulist + ")";
    if (inv.numa_nodes.size() == 1) where += ", the only node";
    if (dev->irqs.empty())
        return make(id, name, CheckStatus::kWarn,
                    where + "; no MSI IRQs listed under device/msi_irqs",
                    "check that the driver is bound (lspci -k) and uses MSI-X");
    int on = 0, mixed = 0, off = 0, unreadable = 0;
    std::string off_list;
    for (const IrqAffinity& a : read_irq_affinity(roots, dev->irqs)) {
        if (!a.readable) {
            ++unreadable;
            continue;
        }
        if (subset(a.cpus, n->cpus)) {
            ++on;
            continue;
        }
        intersects(a.cpus, n->cpus) ? ++mixed : ++off;
        if (off_list.size() < 120)
            off_list += (off_list.empty() ? "" : ", ") + std::to_string(a.irq) + "->" + a.list;
    }
    std::string detail = where + "; IRQs: " + std::to_string(on) + " of " +
                         std::to_string(dev->irqs.size()) + " on node " + std::to_string(n->id);
    if (off) detail += ", " + std::to_string(off) + " entirely off-node";
    if (mixed) detail += ", " + std::to_string(mixed) + " spanning other nodes";
    if (unreadable) detail += ", " + std::to_string(unreadable) + " unreadable";
    if (!off_list.empty()) detail += " (" + off_list + ")";
    const std::string fix =
        "pgrac_ctl numa bind-irqs --device " + dev->name +
        " (and keep irqbalance from moving them back, e.g. IRQBALANCE_BANNED_CPULIST"
        " or stop irqbalance)";
    if (off) return make(id, name, CheckStatus::kFail, detail, fix);
    if (mixed || unreadable) return make(id, name, CheckStatus::kWarn, detail, fix);
    return make(id, name, CheckStatus::kPass, detail);
}

std::string dcqcn_state(const RdmaPort& port) {
    if (port.ecn_rp_mask < 0 && port.ecn_np_mask < 0) return "unknown";
    const int mask = std::max(port.ecn_rp_mask, 0) | std::max(port.ecn_np_mask, 0);
    if (!mask) return "disabled";
    return "enabled (priorities " + priority_list(mask) + ")";
}

CheckResult check_pfc_ecn(const SysRoots& roots, const RdmaDevice* dev, bool query) {
    const char* id = "pfc_ecn";
    const char* name = "PFC/ECN (RoCE)";
    if (!dev) return make(id, name, CheckStatus::kSkip, "no RDMA device");
    const RdmaPort* port = roce_port(*dev);
    if (!port)
        return make(id, name, CheckStatus::kSkip,
                    dev->name +
                        " has no Ethernet port: InfiniBand has link-level credit flow "
                        "control, PFC/ECN do not apply");
    const std::string netdev =
        !port->roce_gid.netdev.empty() ? port->roce_gid.netdev : dev->parent_netdev;
    PfcState pfc;
    if (netdev.empty())
        pfc.error = "no netdev found for the port";
    else if (!roots.live())
        pfc.error = "DCB netlink is not readable from a recorded tree";
    else if (!query)
        pfc.error = "not queried";
    else
        pfc = query_pfc(netdev);

    const bool ecn_known = port->ecn_rp_mask >= 0 || port->ecn_np_mask >= 0;
    const bool ecn_on = ecn_known && dcqcn_state(*port) != "disabled";
    std::string detail = dev->name + " port " + std::to_string(port->num) + " (netdev " +
                         (netdev.empty() ? "?" : netdev) + "): PFC ";
    detail += pfc.known
                  ? (pfc.enabled_mask ? "enabled on priorities " + priority_list(pfc.enabled_mask)
                                      : std::string("disabled on all priorities"))
                  : "unknown (" + pfc.error + ")";
    detail += "; ECN/DCQCN " +
              (ecn_known ? dcqcn_state(*port)
                         : std::string("unknown (no ecn/roce_np|roce_rp knobs in sysfs)"));
    if (pfc.known && pfc.enabled_mask && ecn_on) return make(id, name, CheckStatus::kPass, detail);
    const std::string nd = netdev.empty() ? "<netdev>" : netdev;
    if ((pfc.known && !pfc.enabled_mask) || (ecn_known && !ecn_on))
        return make(id, name, CheckStatus::kWarn, detail,
                    "enable PFC on the RoCE priority on host and switch (dcb pfc set dev " + nd +
                        " prio-pfc 3:on, or mlnx_qos -i " + nd +
                        " --pfc 0,0,0,1,0,0,0,0) and DCQCN (echo 1 > /sys/class/net/" + nd +
                        "/ecn/roce_np/enable/3 and .../roce_rp/enable/3)");
    return make(id, name, CheckStatus::kWarn, detail,
                "check on the switch that the RoCE traffic class is lossless (PFC on, usually "
                "priority 3) and ECN-marks (e.g. `show interface priority-flow-control`, `show qos "
                "ecn`); on the host: dcb pfc show dev " +
                    nd + " or mlnx_qos -i " + nd);
}

}  // namespace pgrac::tiers
