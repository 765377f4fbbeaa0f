#include "tiers/detect/dcb_pfc.hpp"

#include <linux/dcbnl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pgrac::tiers {
namespace {

struct Fd {
    int fd;
    ~Fd() {
        if (fd >= 0) close(fd);
    }
};

// Finds the IEEE PFC attribute in an RTM_GETDCB reply.
bool parse_reply(const nlmsghdr* nh, PfcState& st) {
    const auto* dcb = static_cast<const dcbmsg*>(NLMSG_DATA(nh));
    int len = static_cast<int>(nh->nlmsg_len) - NLMSG_LENGTH(sizeof(*dcb));
    const auto* rta = reinterpret_cast<const rtattr*>(reinterpret_cast<const char*>(dcb) +
                                                      NLMSG_ALIGN(sizeof(*dcb)));
    for (; RTA_OK(rta, len); rta = RTA_NEXT(rta, len)) {
        if (rta->rta_type != DCB_ATTR_IEEE) continue;
        int inner_len = static_cast<int>(RTA_PAYLOAD(rta));
        for (auto* in = static_cast<const rtattr*>(RTA_DATA(rta)); RTA_OK(in, inner_len);
             in = RTA_NEXT(in, inner_len)) {
            if (in->rta_type == DCB_ATTR_IEEE_PFC && RTA_PAYLOAD(in) >= sizeof(ieee_pfc)) {
                ieee_pfc pfc;
                std::memcpy(&pfc, RTA_DATA(in), sizeof(pfc));
                st.known = true;
                st.enabled_mask = pfc.pfc_en;
                return true;
            }
        }
    }
    st.error = "the driver reports no IEEE PFC configuration";
    return false;
}

PfcState query(const std::string& netdev) {
    PfcState st;
    if (netdev.empty() || netdev.size() >= 16) {
        st.error = "no netdev";
        return st;
    }
    Fd s{socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)};
    if (s.fd < 0) {
        st.error = std::string("netlink socket: ") + std::strerror(errno);
        return st;
    }
    timeval tv{1, 0};
    setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

    struct {
        nlmsghdr nh;
        dcbmsg dcb;
        char attrs[64];
    } req{};
    auto* rta =
        reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req.dcb) + NLMSG_ALIGN(sizeof(dcbmsg)));
    rta->rta_type = DCB_ATTR_IFNAME;
    rta->rta_len = static_cast<unsigned short>(RTA_LENGTH(netdev.size() + 1));
    std::memcpy(RTA_DATA(rta), netdev.c_str(), netdev.size() + 1);
    req.nh.nlmsg_len = NLMSG_ALIGN(NLMSG_LENGTH(sizeof(dcbmsg))) + RTA_ALIGN(rta->rta_len);
    req.nh.nlmsg_type = RTM_GETDCB;
    req.nh.nlmsg_flags = NLM_F_REQUEST;
    req.nh.nlmsg_seq = 1;
    req.dcb.dcb_family = AF_UNSPEC;
    req.dcb.cmd = DCB_CMD_IEEE_GET;
    if (send(s.fd, &req, req.nh.nlmsg_len, 0) < 0) {
        st.error = std::string("netlink send: ") + std::strerror(errno);
        return st;
    }
    alignas(nlmsghdr) char buf[8192];
    ssize_t n = recv(s.fd, buf, sizeof(buf), 0);
    if (n < 0) {
        st.error = std::string("netlink recv: ") + std::strerror(errno);
        return st;
    }
    int len = static_cast<int>(n);
// NLMSG_OK compares the header's u32 length with the int byte count.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
    for (auto* nh = reinterpret_cast<const nlmsghdr*>(buf); NLMSG_OK(nh, len);
         nh = NLMSG_NEXT(nh, len)) {
        if (nh->nlmsg_type == NLMSG_ERROR) {
            const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(nh));
            st.error = std::string("DCB netlink on ") + netdev + ": " + std::strerror(-err->error);
            return st;
        }
        if (nh->nlmsg_type == RTM_GETDCB) {
            parse_reply(nh, st);
            return st;
        }
    }
#pragma GCC diagnostic pop
    st.error = "no DCB reply";
    return st;
}

}  // namespace

PfcState query_pfc(const std::string& netdev) {
    try {
        return query(netdev);
    } catch (...) {
        PfcState st;
        st.error = "DCB query failed";
        return st;
    }
}

std::string priority_list(int mask) {
    std::string out;
    for (int p = 0; p < 8; ++p)
        if (mask & (1 << p)) out += (out.empty() ? "" : ",") + std::to_string(p);
    return out.empty() ? "none" : out;
}

}  // namespace pgrac::tiers
