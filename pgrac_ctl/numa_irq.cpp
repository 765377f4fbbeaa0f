#include "numa_irq.hpp"

#include <unistd.h>

#include <algorithm>

namespace pgrac::ctl {

BindPlan plan_bind_irqs(const tiers::SysRoots& roots, const std::string& device) {
    BindPlan plan;
    const tiers::RdmaInventory inv = tiers::scan_rdma(roots);
    const tiers::RdmaDevice* dev = nullptr;
    if (!device.empty()) {
        dev = tiers::find_device(inv, device);
        if (!dev) {
            plan.error =
                "no RDMA device named " + device + " under " + roots.sysfs + "/class/infiniband";
            return plan;
        }
    } else {
        for (const tiers::RdmaDevice& d : inv.devices)
            if (!dev || (dev->irqs.empty() && !d.irqs.empty())) dev = &d;
        if (!dev) {
            plan.error = "no RDMA device under " + roots.sysfs + "/class/infiniband";
            return plan;
        }
    }
    plan.device = dev->name;
    if (dev->irqs.empty()) {
        plan.note = dev->name +
                    (dev->software ? " is a software device with no IRQs of its own"
                                   : " lists no MSI IRQs under device/msi_irqs") +
                    "; nothing to bind";
        return plan;
    }
    plan.node = tiers::effective_numa_node(inv, *dev);
    const tiers::NumaNode* node = tiers::find_numa_node(inv, plan.node);
    if (!node || node->cpus.empty()) {
        plan.error = dev->name + " reports no NUMA node with CPUs (numa_node " +
                     std::to_string(dev->numa_node) + "); cannot choose CPUs";
        return plan;
    }
    plan.cpulist = tiers::format_cpulist(node->cpus);
    size_t next = 0;
    for (const tiers::IrqAffinity& a : tiers::read_irq_affinity(roots, dev->irqs)) {
        IrqChange c;
        c.irq = a.irq;
        c.from = a.list;
        c.change =
            !a.readable || a.cpus.empty() ||
            !std::includes(node->cpus.begin(), node->cpus.end(), a.cpus.begin(), a.cpus.end());
        if (c.change) c.to = std::to_string(node->cpus[next++ % node->cpus.size()]);
        plan.irqs.push_back(c);
    }
    return plan;
}

int cmd_bind_irqs(const tiers::SysRoots& roots, const std::string& device, bool dry_run,
                  std::ostream& out, std::ostream& err) {
    const BindPlan plan = plan_bind_irqs(roots, device);
    if (!plan.error.empty()) {
        err << "pgrac_ctl numa bind-irqs: " << plan.error << '\n';
        return 1;
    }
    if (!plan.note.empty()) {
        out << plan.note << '\n';
        return 0;
    }
    if (!dry_run && geteuid() != 0) {
        err << "pgrac_ctl numa bind-irqs: must run as root to write " << roots.procfs
            << "/irq/<N>/smp_affinity_list (running as uid " << geteuid()
            << "); use --dry-run to see the changes\n";
        return 1;
    }
    out << plan.device << ": NUMA node " << plan.node << ", CPUs " << plan.cpulist << "; "
        << plan.irqs.size() << " IRQs" << (dry_run ? " (dry run: nothing is written)" : "") << '\n';
    int changed = 0, kept = 0, failed = 0;
    for (const IrqChange& c : plan.irqs) {
        const std::string from = c.from.empty() ? "?" : c.from;
        if (!c.change) {
            out << "IRQ " << c.irq << ": " << from << " (already on node " << plan.node << ")\n";
            ++kept;
            continue;
        }
        if (dry_run) {
            out << "IRQ " << c.irq << ": " << from << " -> " << c.to << " (would change)\n";
            ++changed;
            continue;
        }
        std::string why;
        const std::string path =
            roots.procfs + "/irq/" + std::to_string(c.irq) + "/smp_affinity_list";
        if (tiers::sysfs::write_text(path, c.to + "\n", &why)) {
            out << "IRQ " << c.irq << ": " << from << " -> " << c.to << " (changed)\n";
            ++changed;
        } else {
            // Managed IRQs (kernel-spread) refuse new affinities with EIO.
            out << "IRQ " << c.irq << ": " << from << " -> " << c.to << " FAILED: " << why << '\n';
            ++failed;
        }
    }
    out << changed << (dry_run ? " would change, " : " changed, ") << kept << " already on node "
        << plan.node;
    if (failed) out << ", " << failed << " failed";
    out << '\n';
    return failed ? 1 : 0;
}

}  // namespace pgrac::ctl
