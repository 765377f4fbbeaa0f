// `pgrac_ctl verify rdma`: the quick checks of src/tiers plus the live
// loopback test, as a table or one JSON document.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "loopback.hpp"
#include "memlock.hpp"
#include "tiers/detect/rdma_checks.hpp"

namespace pgrac::ctl {

struct VerifyCmd {
    std::string device;
    std::string tier = "auto";
    bool strict = false;
    bool json = false;
    int iters = 1000;    // loopback ping-pong round trips
    int bw_iters = 256;  // loopback 64 KiB messages streamed
    MemlockCmd memlock;  // whose locked-memory limit, and the pool's page size
};

struct VerifyReport {
    tiers::SysRoots roots;
    tiers::RdmaInventory inv;
    tiers::TierDecision decision;
    std::string device;  // the device the checks are about ("" = none)
    std::vector<tiers::CheckResult> checks;
    std::optional<LoopbackResult> loopback;  // set when the test ran
    LoopbackOptions loopback_opts;
    int exit_code = 0;  // 1 when a check failed
};

VerifyReport run_verify(const tiers::SysRoots& roots, const VerifyCmd& cmd);
nlohmann::ordered_json verify_json(const VerifyReport& r);
void print_verify_table(std::ostream& out, const VerifyReport& r);
// Runs, prints, returns the exit code.
int cmd_verify_rdma(const tiers::SysRoots& roots, const VerifyCmd& cmd, std::ostream& out);

}  // namespace pgrac::ctl
