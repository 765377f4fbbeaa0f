// RDMA hardware detection from sysfs/procfs: devices, ports, RoCE GIDs,
// hugepages, NUMA nodes and the device's IRQs. Pure file reads through a
// root prefix (SysRoots), no verbs calls, no exceptions: the extension runs
// this at postmaster start. rdma_live.hpp adds what only verbs can tell.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tiers/detect/sysfs_util.hpp"

namespace pgrac::tiers {

enum class LinkLayer { kUnknown, kInfiniBand, kEthernet };
const char* link_layer_name(LinkLayer ll);  // "InfiniBand", "Ethernet", "unknown"

struct RdmaGid {
    int index = -1;    // -1: none chosen
    std::string gid;   // as sysfs prints it: 8 groups of 4 hex digits
    std::string type;  // "RoCE v2", "IB/RoCE v1"
    std::string netdev;
    bool ipv4_mapped = false;
};

struct RdmaPort {
    int num = 0;
    int state_code = 0;  // ib_port_state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE
    std::string state;   // "ACTIVE"
    std::string phys_state;
    LinkLayer link_layer = LinkLayer::kUnknown;
    int active_mtu = 0;  // bytes; 0 = unknown (sysfs rarely has it; see rdma_live.hpp)
    std::string rate;    // "100 Gb/sec (4X EDR)"
    long long lid = 0;
    RdmaGid roce_gid;  // Ethernet ports: the GID a RoCE v2 QP should use
    // DCQCN (ECN) per priority as a bit mask, from the mlx5 sysfs knobs
    // class/net/<netdev>/ecn/roce_{rp,np}/enable/<prio>; -1 = not readable.
    int ecn_rp_mask = -1;
    int ecn_np_mask = -1;

    bool active() const { return state_code == 4; }
};

struct RdmaDevice {
    std::string name;       // rxe0, mlx5_0
    std::string node_type;  // "CA", "RNIC" (iWARP), ...
    std::string fw_ver, hca_type, board_id;
    std::string pci_address;                // empty for software devices
    uint32_t vendor_id = 0, device_id = 0;  // PCI ids; 0 = unknown
    std::string driver;          // kernel driver of the function: mlx5_core, bnxt_en, rdma_rxe
    std::string driver_version;  // /sys/module/<driver>/version; empty for in-tree drivers
    std::string vendor;          // "mlx5" or "other"
    std::string parent_netdev;   // software devices: the netdev they run on
    bool software = false;       // rxe/siw: emulated by the kernel
    int numa_node = -1;          // -1 = not reported
    std::vector<int> irqs;       // MSI/MSI-X vectors of the PCI function
    std::string uverbs;          // "uverbs0"; empty when ib_uverbs has no node for it
    std::vector<RdmaPort> ports;
    // Filled by apply_live_info(); unknown until then.
    int xrc = -1;  // 1 yes, 0 no, -1 unknown
    uint32_t vendor_part_id = 0;
    bool live_queried = false;
};

struct HugepagePool {
    uint64_t size_kb = 0;  // 2048 or 1048576
    bool present = false;  // the kernel offers this size
    long long nr = 0, free = 0;
};

struct NumaNode {
    int id = 0;
    std::string cpulist;
    std::vector<int> cpus;
};

struct IrqAffinity {
    int irq = 0;
    bool readable = false;
    std::string list;  // smp_affinity_list as read
    std::vector<int> cpus;
};

struct RdmaInventory {
    std::vector<RdmaDevice> devices;      // sorted by name
    std::vector<HugepagePool> hugepages;  // always 2 MB then 1 GB
    std::vector<NumaNode> numa_nodes;     // empty if the kernel shows none
    int uverbs_abi = -1;
    std::string kernel_release;
    // rdma-core's version from the libibverbs mapped into this process
    // (<procfs>/self/maps: .../libibverbs.so.1.<abi>.<rdma-core>), e.g. "44.0";
    // empty when not mapped. A recorded tree carries its own proc/self/maps.
    std::string rdma_core;
    bool live = false;                // read from the running kernel's /sys and /proc
    std::vector<std::string> errors;  // what could not be read, for diagnostics
};

// Reads everything above. Never throws; problems land in .errors.
RdmaInventory scan_rdma(const SysRoots& roots);

// nullptr when absent.
const RdmaDevice* find_device(const RdmaInventory& inv, const std::string& name);
const NumaNode* find_numa_node(const RdmaInventory& inv, int id);
// The node whose CPUs serve the device: its numa_node, or the only node of a
// single-node machine (PCI devices there often report -1). -1 if unknown.
int effective_numa_node(const RdmaInventory& inv, const RdmaDevice& dev);

// procfs irq/<N>/smp_affinity_list for each IRQ.
std::vector<IrqAffinity> read_irq_affinity(const SysRoots& roots, const std::vector<int>& irqs);

// "44.0" from a path ending in libibverbs.so.1.14.44.0; empty if it does not.
std::string rdma_core_from_library_path(const std::string& path);

// "mlx5" for ConnectX devices driven by mlx5, else "other".
std::string classify_vendor(const std::string& dev_name, const std::string& driver);
// Human name of a PCI vendor id ("Mellanox/NVIDIA"), empty if not known.
std::string pci_vendor_name(uint32_t vendor_id);

}  // namespace pgrac::tiers
