#include "tiers/detect/rdma_detect.hpp"

#include <algorithm>
#include <cctype>
#include <exception>
#include <tuple>

namespace pgrac::tiers {
namespace {

using sysfs::list_dir;
using sysfs::parse_int;
using sysfs::read_trimmed;

std::string read_or_empty(const std::string& path) {
    return read_trimmed(path).value_or("");
}

// "4: ACTIVE" -> (4, "ACTIVE"); "1: CA" -> (1, "CA").
std::pair<int, std::string> split_numbered(const std::string& s) {
    size_t colon = s.find(':');
    if (colon == std::string::npos) return {0, s};
    int code = static_cast<int>(parse_int(s.substr(0, colon)).value_or(0));
    size_t start = s.find_first_not_of(' ', colon + 1);
    return {code, start == std::string::npos ? std::string() : s.substr(start)};
}

bool starts_with(const std::string& s, const char* prefix) {
    return s.rfind(prefix, 0) == 0;
}

// Preference among a port's GIDs for RoCE: v2 first (routable, what the
// verbs tier speaks), then an IPv4-mapped address, then a global IPv6 one.
int gid_score(const RdmaGid& g) {
    int score = g.type == "RoCE v2" ? 100 : 0;
    if (g.ipv4_mapped)
        score += 10;
    else if (!starts_with(g.gid, "fe80:"))
        score += 5;
    return score;
}

RdmaGid choose_roce_gid(const std::string& port_dir) {
    RdmaGid best;
    int best_score = -1;
    // rxe exposes 1024 slots; only the populated ones are read further.
    for (const std::string& idx : list_dir(port_dir + "/gids")) {
        auto gid = read_trimmed(port_dir + "/gids/" + idx);
        if (!gid || gid->find_first_not_of("0:") == std::string::npos) continue;
        RdmaGid g;
        g.index = static_cast<int>(parse_int(idx).value_or(-1));
        g.gid = *gid;
        g.type = read_or_empty(port_dir + "/gid_attrs/types/" + idx);
        g.netdev = read_or_empty(port_dir + "/gid_attrs/ndevs/" + idx);
        g.ipv4_mapped = starts_with(g.gid, "0000:0000:0000:0000:0000:ffff:");
        if (g.index < 0 || g.type.empty()) continue;
        int score = gid_score(g);
        if (score > best_score) {
            best = g;
            best_score = score;
        }
    }
    return best;
}

// Bit p set when class/net/<netdev>/ecn/<dir>/enable/<p> reads 1.
int read_ecn_mask(const SysRoots& roots, const std::string& netdev, const char* dir) {
    const std::string base = roots.sysfs + "/class/net/" + netdev + "/ecn/" + dir + "/enable/";
    int mask = 0;
    bool any = false;
    for (int prio = 0; prio < 8; ++prio) {
        auto v = read_trimmed(base + std::to_string(prio));
        if (!v) continue;
        any = true;
        if (*v == "1") mask |= 1 << prio;
    }
    return any ? mask : -1;
}

RdmaPort read_port(const SysRoots& roots, const std::string& dev_dir, const std::string& num) {
    const std::string dir = dev_dir + "/ports/" + num;
    RdmaPort p;
    p.num = static_cast<int>(parse_int(num).value_or(0));
    std::tie(p.state_code, p.state) = split_numbered(read_or_empty(dir + "/state"));
    p.phys_state = split_numbered(read_or_empty(dir + "/phys_state")).second;
    const std::string ll = read_or_empty(dir + "/link_layer");
    p.link_layer = ll == "InfiniBand" ? LinkLayer::kInfiniBand
                   : ll == "Ethernet" ? LinkLayer::kEthernet
                                      : LinkLayer::kUnknown;
    p.active_mtu = static_cast<int>(parse_int(read_or_empty(dir + "/active_mtu")).value_or(0));
    p.rate = read_or_empty(dir + "/rate");
    p.lid = parse_int(read_or_empty(dir + "/lid")).value_or(0);
    if (p.link_layer == LinkLayer::kEthernet) {
        p.roce_gid = choose_roce_gid(dir);
        if (!p.roce_gid.netdev.empty()) {
            p.ecn_rp_mask = read_ecn_mask(roots, p.roce_gid.netdev, "roce_rp");
            p.ecn_np_mask = read_ecn_mask(roots, p.roce_gid.netdev, "roce_np");
        }
    }
    return p;
}

// The driver when no PCI function is linked (software devices), by name.
std::string driver_from_name(const std::string& name) {
    if (starts_with(name, "rxe")) return "rdma_rxe";
    if (starts_with(name, "siw")) return "siw";
    if (starts_with(name, "mlx5")) return "mlx5_core";
    return "";
}

RdmaDevice read_device(const SysRoots& roots, const std::string& name) {
    const std::string dir = roots.sysfs + "/class/infiniband/" + name;
    RdmaDevice d;
    d.name = name;
    d.node_type = split_numbered(read_or_empty(dir + "/node_type")).second;
    d.fw_ver = read_or_empty(dir + "/fw_ver");
    d.hca_type = read_or_empty(dir + "/hca_type");
    d.board_id = read_or_empty(dir + "/board_id");
    d.parent_netdev = read_or_empty(dir + "/parent");
    if (sysfs::exists(dir + "/device")) {
        d.pci_address = sysfs::link_target_name(dir + "/device").value_or("");
        d.vendor_id =
            static_cast<uint32_t>(parse_int(read_or_empty(dir + "/device/vendor")).value_or(0));
        d.device_id =
            static_cast<uint32_t>(parse_int(read_or_empty(dir + "/device/device")).value_or(0));
        d.numa_node =
            static_cast<int>(parse_int(read_or_empty(dir + "/device/numa_node")).value_or(-1));
        d.driver = sysfs::link_target_name(dir + "/device/driver").value_or("");
        for (const std::string& irq : list_dir(dir + "/device/msi_irqs"))
            if (auto n = parse_int(irq)) d.irqs.push_back(static_cast<int>(*n));
    }
    if (d.driver.empty()) d.driver = driver_from_name(name);
    d.software = d.driver == "rdma_rxe" || d.driver == "siw";
    if (!d.driver.empty())
        d.driver_version = read_or_empty(roots.sysfs + "/module/" + d.driver + "/version");
    d.vendor = classify_vendor(name, d.driver);
    for (const std::string& port : list_dir(dir + "/ports"))
        d.ports.push_back(read_port(roots, dir, port));
    return d;
}

void read_uverbs(const SysRoots& roots, RdmaInventory& inv) {
    const std::string dir = roots.sysfs + "/class/infiniband_verbs";
    inv.uverbs_abi = static_cast<int>(parse_int(read_or_empty(dir + "/abi_version")).value_or(-1));
    for (const std::string& node : list_dir(dir)) {
        if (!starts_with(node, "uverbs")) continue;
        const std::string ibdev = read_or_empty(dir + "/" + node + "/ibdev");
        for (RdmaDevice& d : inv.devices)
            if (d.name == ibdev) d.uverbs = node;
    }
}

void read_hugepages(const SysRoots& roots, RdmaInventory& inv) {
    for (uint64_t kb : {2048ull, 1048576ull}) {
        const std::string dir =
            roots.sysfs + "/kernel/mm/hugepages/hugepages-" + std::to_string(kb) + "kB";
        HugepagePool pool;
        pool.size_kb = kb;
        pool.present = sysfs::exists(dir);
        pool.nr = parse_int(read_or_empty(dir + "/nr_hugepages")).value_or(0);
        pool.free = parse_int(read_or_empty(dir + "/free_hugepages")).value_or(0);
        inv.hugepages.push_back(pool);
    }
}

// The first libibverbs mapped into the process, from <procfs>/self/maps.
void read_rdma_core(const SysRoots& roots, RdmaInventory& inv) {
    const std::string maps = read_or_empty(roots.procfs + "/self/maps");
    size_t pos = 0;
    while (pos < maps.size()) {
        size_t end = maps.find('\n', pos);
        if (end == std::string::npos) end = maps.size();
        const std::string line = maps.substr(pos, end - pos);
        pos = end + 1;
        const size_t slash = line.find('/');
        if (slash == std::string::npos) continue;
        const std::string v = rdma_core_from_library_path(line.substr(slash));
        if (!v.empty()) {
            inv.rdma_core = v;
            return;
        }
    }
}

void read_numa(const SysRoots& roots, RdmaInventory& inv) {
    const std::string dir = roots.sysfs + "/devices/system/node";
    std::vector<NumaNode> nodes;
    for (const std::string& entry : list_dir(dir)) {
        if (!starts_with(entry, "node")) continue;
        auto id = parse_int(entry.substr(4));
        if (!id) continue;
        NumaNode n;
        n.id = static_cast<int>(*id);
        n.cpulist = read_or_empty(dir + "/" + entry + "/cpulist");
        if (auto cpus = parse_cpulist(n.cpulist))
            n.cpus = *cpus;
        else
            inv.errors.push_back(dir + "/" + entry + "/cpulist: malformed '" + n.cpulist + "'");
        nodes.push_back(n);
    }
    std::sort(nodes.begin(), nodes.end(),
              [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
    inv.numa_nodes = std::move(nodes);
}

}  // namespace

const char* link_layer_name(LinkLayer ll) {
    switch (ll) {
        case LinkLayer::kInfiniBand:
            return "InfiniBand";
        case LinkLayer::kEthernet:
            return "Ethernet";
        default:
            return "unknown";
    }
}

std::string rdma_core_from_library_path(const std::string& path) {
    // libibverbs.so.1.14.44.0 -> "44.0"
    const std::string marker = "/libibverbs.so.1.";
    const size_t at = path.rfind(marker);
    if (at == std::string::npos) return "";
    std::string rest = path.substr(at + marker.size());  // "14.44.0"
    while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\r')) rest.pop_back();
    const size_t dot = rest.find('.');
    if (dot == std::string::npos || dot + 1 >= rest.size()) return "";
    for (char c : rest)
        if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.') return "";
    return rest.substr(dot + 1);
}

std::string classify_vendor(const std::string& dev_name, const std::string& driver) {
    return starts_with(driver, "mlx5") || starts_with(dev_name, "mlx5") ? "mlx5" : "other";
}

std::string pci_vendor_name(uint32_t vendor_id) {
    switch (vendor_id) {
        case 0x15b3:
            return "Mellanox/NVIDIA";
        case 0x14e4:
            return "Broadcom";
        case 0x8086:
            return "Intel";
        case 0x1077:
            return "QLogic/Marvell";
        case 0x19e5:
            return "Huawei";
        case 0x1d0f:
            return "Amazon";
        case 0x1fc1:
            return "QLogic (PathScale)";
        default:
            return "";
    }
}

RdmaInventory scan_rdma(const SysRoots& roots) {
    RdmaInventory inv;
    try {
        for (const std::string& name : list_dir(roots.sysfs + "/class/infiniband"))
            inv.devices.push_back(read_device(roots, name));
        read_uverbs(roots, inv);
        read_hugepages(roots, inv);
        read_numa(roots, inv);
        inv.kernel_release = read_or_empty(roots.procfs + "/sys/kernel/osrelease");
        read_rdma_core(roots, inv);
        inv.live = roots.live();
    } catch (const std::exception& e) {
        inv.errors.push_back(std::string("scan failed: ") + e.what());
    }
    return inv;
}

const RdmaDevice* find_device(const RdmaInventory& inv, const std::string& name) {
    for (const RdmaDevice& d : inv.devices)
        if (d.name == name) return &d;
    return nullptr;
}

const NumaNode* find_numa_node(const RdmaInventory& inv, int id) {
    for (const NumaNode& n : inv.numa_nodes)
        if (n.id == id) return &n;
    return nullptr;
}

int effective_numa_node(const RdmaInventory& inv, const RdmaDevice& dev) {
    if (dev.numa_node >= 0) return dev.numa_node;
    return inv.numa_nodes.size() == 1 ? inv.numa_nodes[0].id : -1;
}

std::vector<IrqAffinity> read_irq_affinity(const SysRoots& roots, const std::vector<int>& irqs) {
    std::vector<IrqAffinity> out;
    try {
        for (int irq : irqs) {
            IrqAffinity a;
            a.irq = irq;
            auto list =
                read_trimmed(roots.procfs + "/irq/" + std::to_string(irq) + "/smp_affinity_list");
            if (list) {
                a.list = *list;
                if (auto cpus = parse_cpulist(*list)) {
                    a.cpus = *cpus;
                    a.readable = true;
                }
            }
            out.push_back(a);
        }
    } catch (const std::exception&) {
        // Only allocation can throw here; report what was read.
    }
    return out;
}

}  // namespace pgrac::tiers
