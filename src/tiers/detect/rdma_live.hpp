// What only the verbs library can tell about a device: XRC capability, the
// active MTU, the vendor part id, queue limits. Opens the device, so it is
// called only when asked (pgrac_ctl's verify rdma and status); the verbs tier
// uses only the pure helpers (mtu_bytes, classify_vendor).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tiers/detect/rdma_detect.hpp"

namespace pgrac::tiers {

struct LivePort {
    int num = 0;
    int state_code = 0;  // ibv_port_state
    int active_mtu = 0;  // bytes
    int max_mtu = 0;
    LinkLayer link_layer = LinkLayer::kUnknown;
    int gid_tbl_len = 0;
};

struct LiveDeviceInfo {
    bool ok = false;
    std::string error;  // set when !ok
    uint32_t vendor_id = 0, vendor_part_id = 0, hw_ver = 0;
    std::string fw_ver;
    bool xrc = false;
    int max_qp = 0, max_qp_wr = 0, max_cqe = 0, max_srq = 0, max_sge = 0;
    int num_comp_vectors = 0;
    std::vector<LivePort> ports;
};

// ibv_open_device + ibv_query_device/ibv_query_port on the named device.
LiveDeviceInfo query_device_live(const std::string& device);
// Copies the live facts into what sysfs gave (active MTU, XRC, part id).
void apply_live_info(RdmaDevice& dev, const LiveDeviceInfo& live);
// Bytes of an ibv_mtu value (IBV_MTU_256 .. IBV_MTU_4096); 0 if unknown.
int mtu_bytes(int ibv_mtu_value);
// Names libibverbs lists (devices with a user-space provider).
std::vector<std::string> verbs_device_names(std::string* error);
// rdma-core's version, from the file name of the loaded libibverbs
// (libibverbs.so.1.<abi>.<rdma-core version>), e.g. "44.0"; empty if unknown.
std::string rdma_core_version();

}  // namespace pgrac::tiers
