#include "tiers/detect/rdma_live.hpp"

#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <link.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>

namespace pgrac::tiers {
namespace {

struct DeviceList {
    int n = 0;  // declared first: initialised before list's initialiser writes it
    ibv_device** list = nullptr;
    DeviceList() : list(ibv_get_device_list(&n)) {}
    ~DeviceList() {
        if (list) ibv_free_device_list(list);
    }
};

LiveDeviceInfo query(const std::string& device) {
    LiveDeviceInfo info;
    DeviceList devs;
    if (!devs.list) {
        info.error = std::string("ibv_get_device_list: ") + std::strerror(errno);
        return info;
    }
    ibv_device* found = nullptr;
    for (int i = 0; i < devs.n; ++i)
        if (device == ibv_get_device_name(devs.list[i])) found = devs.list[i];
    if (!found) {
        info.error = "libibverbs lists no device " + device + " (no user-space provider for it?)";
        return info;
    }
    ibv_context* ctx = ibv_open_device(found);
    if (!ctx) {
        info.error = "ibv_open_device(" + device + "): " + std::strerror(errno);
        return info;
    }
    ibv_device_attr attr{};
    if (int rc = ibv_query_device(ctx, &attr)) {
        info.error = "ibv_query_device(" + device + "): " + std::strerror(rc);
        ibv_close_device(ctx);
        return info;
    }
    info.vendor_id = attr.vendor_id;
    info.vendor_part_id = attr.vendor_part_id;
    info.hw_ver = attr.hw_ver;
    info.fw_ver = attr.fw_ver;
    info.xrc = (attr.device_cap_flags & IBV_DEVICE_XRC) != 0;
    info.max_qp = attr.max_qp;
    info.max_qp_wr = attr.max_qp_wr;
    info.max_cqe = attr.max_cqe;
    info.max_srq = attr.max_srq;
    info.max_sge = attr.max_sge;
    info.num_comp_vectors = ctx->num_comp_vectors;
    for (int port = 1; port <= attr.phys_port_cnt; ++port) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, static_cast<uint8_t>(port), &pa)) continue;
        LivePort lp;
        lp.num = port;
        lp.state_code = pa.state;
        lp.active_mtu = mtu_bytes(pa.active_mtu);
        lp.max_mtu = mtu_bytes(pa.max_mtu);
        lp.link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET     ? LinkLayer::kEthernet
                        : pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? LinkLayer::kInfiniBand
                                                                     : LinkLayer::kUnknown;
        lp.gid_tbl_len = pa.gid_tbl_len;
        info.ports.push_back(lp);
    }
    ibv_close_device(ctx);
    info.ok = true;
    return info;
}

int find_ibverbs(dl_phdr_info* info, size_t, void* data) {
    if (info->dlpi_name && std::strstr(info->dlpi_name, "libibverbs.so")) {
        *static_cast<std::string*>(data) = info->dlpi_name;
        return 1;
    }
    return 0;
}

}  // namespace

int mtu_bytes(int ibv_mtu_value) {
    const auto m = static_cast<ibv_mtu>(ibv_mtu_value);
    switch (m) {
        case IBV_MTU_256:
            return 256;
        case IBV_MTU_512:
            return 512;
        case IBV_MTU_1024:
            return 1024;
        case IBV_MTU_2048:
            return 2048;
        case IBV_MTU_4096:
            return 4096;
        default:
            return 0;
    }
}

LiveDeviceInfo query_device_live(const std::string& device) {
    try {
        return query(device);
    } catch (const std::exception& e) {
        LiveDeviceInfo info;
        info.error = e.what();
        return info;
    }
}

void apply_live_info(RdmaDevice& dev, const LiveDeviceInfo& live) {
    if (!live.ok) return;
    dev.live_queried = true;
    dev.xrc = live.xrc ? 1 : 0;
    dev.vendor_part_id = live.vendor_part_id;
    if (dev.fw_ver.empty()) dev.fw_ver = live.fw_ver;
    for (RdmaPort& p : dev.ports)
        for (const LivePort& lp : live.ports)
            if (lp.num == p.num && lp.active_mtu > 0) p.active_mtu = lp.active_mtu;
}

std::vector<std::string> verbs_device_names(std::string* error) {
    std::vector<std::string> names;
    try {
        DeviceList devs;
        if (!devs.list) {
            if (error) *error = std::string("ibv_get_device_list: ") + std::strerror(errno);
            return names;
        }
        for (int i = 0; i < devs.n; ++i) names.emplace_back(ibv_get_device_name(devs.list[i]));
    } catch (const std::exception& e) {
        if (error) *error = e.what();
    }
    return names;
}

std::string rdma_core_version() {
    try {
        // Referencing a verbs symbol keeps libibverbs linked (and so loaded).
        volatile auto keep = &ibv_get_device_list;
        (void)keep;
        std::string loaded;
        dl_iterate_phdr(find_ibverbs, &loaded);
        if (loaded.empty()) return "";
        char resolved[PATH_MAX];
        if (!realpath(loaded.c_str(), resolved)) return "";
        return rdma_core_from_library_path(resolved);
    } catch (const std::exception&) {
        return "";
    }
}

}  // namespace pgrac::tiers
