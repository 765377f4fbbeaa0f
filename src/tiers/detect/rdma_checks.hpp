// The checks of `pgrac_ctl verify rdma` that need no verbs calls: the same
// code feeds pg_cluster_rdma_status.verify_issues in a running instance.
// Order: hca, vendor, driver, hugepages, numa, pfc_ecn, tier (pgrac_ctl puts
// its live loopback test before "tier").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tiers/detect/rdma_detect.hpp"
#include "tiers/detect/tier_select.hpp"

namespace pgrac::tiers {

enum class CheckStatus { kPass, kWarn, kFail, kSkip };
const char* check_status_name(CheckStatus s);  // "PASS", "WARN", "FAIL", "SKIP"

struct CheckResult {
    std::string id;    // hca, vendor, driver, hugepages, numa, pfc_ecn, loopback, tier
    std::string name;  // "HCA presence"
    CheckStatus status = CheckStatus::kSkip;
    std::string detail;  // what was found
    std::string action;  // what to do (empty when nothing)
};

struct VerifyOptions {
    std::string device;  // "" = the device the tier decision uses, else the first
    std::string requested_tier = "auto";
    bool strict = false;
    uint64_t hugepage_size_kb = 0;  // the pool the instance uses; 0 = 2 MB or 1 GB
    bool query_pfc = true;          // DCB netlink, only when the roots are live
};

// The device the checks are about; nullptr when there is none.
const RdmaDevice* select_device(const RdmaInventory& inv, const VerifyOptions& opts,
                                const TierDecision& decision);

CheckResult check_hca(const RdmaInventory& inv, const VerifyOptions& opts, const RdmaDevice* dev);
CheckResult check_vendor(const RdmaDevice* dev);
CheckResult check_driver(const RdmaInventory& inv, const RdmaDevice* dev);
CheckResult check_hugepages(const RdmaInventory& inv, uint64_t want_kb);
CheckResult check_numa(const RdmaInventory& inv, const SysRoots& roots, const RdmaDevice* dev);
CheckResult check_pfc_ecn(const SysRoots& roots, const RdmaDevice* dev, bool query_pfc);
CheckResult check_tier(const TierDecision& decision);

// All of the above, in order. Never throws.
std::vector<CheckResult> run_quick_checks(const RdmaInventory& inv, const SysRoots& roots,
                                          const VerifyOptions& opts);

// The WARN and FAIL results as "id: STATUS: detail" lines; empty when all is
// well. The first form scans the roots itself. Never throws.
std::vector<std::string> quick_verify_issues(const SysRoots& roots, const VerifyOptions& opts = {});
std::vector<std::string> quick_verify_issues(const RdmaInventory& inv, const SysRoots& roots,
                                             const VerifyOptions& opts);

// DCQCN (ECN) state of a RoCE port for pg_cluster_rdma_status.dcqcn:
// "enabled (priorities 3)", "disabled", or "unknown".
std::string dcqcn_state(const RdmaPort& port);

}  // namespace pgrac::tiers
