// `pgrac_ctl numa bind-irqs`: pin an RDMA device's IRQs to the CPUs of its
// NUMA node by writing procfs irq/<N>/smp_affinity_list. IRQs already on the
// node are left alone; the others get one CPU each, round-robin over the
// node's CPUs (as NVIDIA's set_irq_affinity_bynode.sh does), so completion
// vectors do not pile up on one core.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "tiers/detect/rdma_detect.hpp"

namespace pgrac::ctl {

struct IrqChange {
    int irq = 0;
    std::string from;  // current smp_affinity_list ("" if unreadable)
    std::string to;    // the CPU it gets (when change)
    bool change = false;
};

struct BindPlan {
    std::string error;  // set: nothing can be done
    std::string note;   // set: nothing to do, and why
    std::string device;
    int node = -1;
    std::string cpulist;  // the node's CPUs
    std::vector<IrqChange> irqs;
};

BindPlan plan_bind_irqs(const tiers::SysRoots& roots, const std::string& device);
// Prints the plan and, unless dry_run, applies it. Returns the exit code.
int cmd_bind_irqs(const tiers::SysRoots& roots, const std::string& device, bool dry_run,
                  std::ostream& out, std::ostream& err);

}  // namespace pgrac::ctl
