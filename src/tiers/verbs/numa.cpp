// NUMA helpers of the verbs tier: where the HCA sits, and binding the calling
// thread there (libnuma), so that polling and the buffer pool stay local.
#include <numa.h>

#include <fstream>
#include <string>

#include "tiers/verbs/transport.hpp"

namespace pgrac::tiers {

int verbs_device_numa_node(const std::string& device, const std::string& sys_root) {
    std::ifstream in(sys_root + "/class/infiniband/" + device + "/device/numa_node");
    int node = -1;
    if (!(in >> node)) return -1;
    return node;
}

bool bind_thread_to_numa_node(int node, std::string* error) {
    if (node < 0) {
        if (error) *error = "the device reports no NUMA node (software device or single node)";
        return false;
    }
    if (numa_available() < 0) {
        if (error) *error = "NUMA is not available on this machine";
        return false;
    }
    if (node > numa_max_node()) {
        if (error) *error = "NUMA node " + std::to_string(node) + " does not exist";
        return false;
    }
    if (numa_run_on_node(node) != 0) {
        if (error) *error = "numa_run_on_node(" + std::to_string(node) + ") failed";
        return false;
    }
    numa_set_preferred(node);
    return true;
}

}  // namespace pgrac::tiers
