// The locked-memory check of `pgrac_ctl verify rdma`: RLIMIT_MEMLOCK of the
// running postmaster(s), read from /proc/<pid>/limits (the listener, a child,
// registers the verbs buffer pool under that limit), against the pool's size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tiers/detect/rdma_checks.hpp"

namespace pgrac::ctl {

struct MemlockCmd {
    int pid = 0;                        // --pid: that process only
    std::string pgdata;                 // --pgdata: the pid in DIR/postmaster.pid
    std::string user;                   // --user: postmasters of this user only ("" = any)
    std::string hugepage_size = "2MB";  // --hugepage-size: as cluster.rdma_hugepage_size
};

inline constexpr uint64_t kUnlimited = UINT64_MAX;

struct MemlockLimits {
    uint64_t soft = 0, hard = 0;  // bytes, or kUnlimited
};

// "Max locked memory" of a /proc/<pid>/limits text; nullopt if absent.
std::optional<MemlockLimits> parse_memlock_limits(const std::string& limits_text);

struct ProcessLimits {
    int pid = 0;
    long uid = -1;
    bool cap_ipc_lock = false;  // CAP_IPC_LOCK in CapEff: no limit applies
    std::optional<MemlockLimits> limits;
};

// Postmasters under a procfs root: processes whose comm is "postgres" or
// "postmaster" and whose parent's is neither (backends and workers are their
// children), sorted by pid.
std::vector<int> find_postmasters(const std::string& procfs);
// comm, status (Uid, CapEff) and limits of one process; nullopt if it has no status.
std::optional<ProcessLimits> read_process_limits(const std::string& procfs, int pid);

// Bytes the verbs buffer pool of an instance pins with the given
// cluster.rdma_hugepage_size ("none", "2MB", "1GB").
size_t memlock_pool_bytes(const std::string& hugepage_size);
// Headroom beyond the pool for the queues' buffers (QP, CQ, SRQ).
inline constexpr uint64_t kMemlockHeadroom = 4u << 20;

// The check; `tier` is the tier an instance would run at ("" if none).
tiers::CheckResult memlock_check(const tiers::SysRoots& roots, const MemlockCmd& cmd,
                                 const std::string& tier);

}  // namespace pgrac::ctl
