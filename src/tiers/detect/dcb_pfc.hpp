// PFC state of a netdev from the kernel's DCB netlink interface (what
// `dcb pfc show` and lldptool read). Live machine only.
#pragma once

#include <string>

namespace pgrac::tiers {

struct PfcState {
    bool known = false;
    int enabled_mask = 0;  // bit p: PFC on priority p
    std::string error;     // why unknown
};

// RTM_GETDCB / DCB_CMD_IEEE_GET for the netdev. Never throws.
PfcState query_pfc(const std::string& netdev);

// "3,4" for mask 0x18; "none" for 0.
std::string priority_list(int mask);

}  // namespace pgrac::tiers
