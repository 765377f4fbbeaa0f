#include "memlock.hpp"

#include <pwd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "tiers/detect/sysfs_util.hpp"
#include "tiers/verbs/transport.hpp"

namespace pgrac::ctl {
namespace {

using tiers::CheckResult;
using tiers::CheckStatus;
namespace sysfs = tiers::sysfs;

constexpr int kCapIpcLock = 14;  // linux/capability.h

std::string mib(uint64_t bytes) {
    if (bytes == kUnlimited) return "unlimited";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return buf;
}

// Value of a "Key:\tvalue" line of /proc/<pid>/status.
std::optional<std::string> status_field(const std::string& status, const std::string& key) {
    std::istringstream in(status);
    std::string line;
    while (std::getline(in, line))
        if (line.compare(0, key.size() + 1, key + ":") == 0) {
            const size_t at = line.find_first_not_of(" \t", key.size() + 1);
            return at == std::string::npos ? "" : line.substr(at);
        }
    return std::nullopt;
}

bool is_postgres_comm(const std::string& procfs, int pid) {
    const auto comm = sysfs::read_trimmed(procfs + "/" + std::to_string(pid) + "/comm");
    return comm && (*comm == "postgres" || *comm == "postmaster");
}

std::string who(const tiers::SysRoots& roots, long uid) {
    if (roots.live())
        if (const passwd* pw = getpwuid(static_cast<uid_t>(uid)))
            return std::string("user ") + pw->pw_name;
    return "uid " + std::to_string(uid);
}

// The verdict on one limit: PASS, WARN (the pool fits, the queues may not), FAIL.
CheckStatus judge(const ProcessLimits& p, uint64_t need) {
    if (p.cap_ipc_lock) return CheckStatus::kPass;
    if (!p.limits) return CheckStatus::kFail;
    if (p.limits->soft == kUnlimited || p.limits->soft >= need + kMemlockHeadroom)
        return CheckStatus::kPass;
    return p.limits->soft >= need ? CheckStatus::kWarn : CheckStatus::kFail;
}

std::string describe(const tiers::SysRoots& roots, const std::string& what,
                     const ProcessLimits& p) {
    std::string s = what + " (" + who(roots, p.uid) + "): ";
    if (p.cap_ipc_lock) return s + "has CAP_IPC_LOCK, no limit applies";
    if (!p.limits) return s + "no \"Max locked memory\" in its limits";
    return s + "soft limit " + mib(p.limits->soft) + ", hard " + mib(p.limits->hard);
}

int rank(CheckStatus s) {
    return s == CheckStatus::kFail ? 3 : s == CheckStatus::kWarn ? 2 : s == CheckStatus::kPass;
}

}  // namespace

std::optional<MemlockLimits> parse_memlock_limits(const std::string& limits_text) {
    std::istringstream in(limits_text);
    std::string line;
    const std::string key = "Max locked memory";
    while (std::getline(in, line)) {
        if (line.compare(0, key.size(), key) != 0) continue;
        std::istringstream fields(line.substr(key.size()));
        std::string soft, hard;
        if (!(fields >> soft >> hard)) return std::nullopt;
        auto value = [](const std::string& v) -> std::optional<uint64_t> {
            if (v == "unlimited") return kUnlimited;
            const auto n = sysfs::parse_int(v);
            if (!n || *n < 0) return std::nullopt;
            return static_cast<uint64_t>(*n);
        };
        const auto s = value(soft), h = value(hard);
        if (!s || !h) return std::nullopt;
        return MemlockLimits{*s, *h};
    }
    return std::nullopt;
}

std::vector<int> find_postmasters(const std::string& procfs) {
    std::vector<int> found;
    for (const std::string& name : sysfs::list_dir(procfs)) {
        const auto pid = sysfs::parse_int(name);
        if (!pid || *pid <= 0 || name[0] == '0' || !is_postgres_comm(procfs, *pid)) continue;
        const auto status = sysfs::read_trimmed(procfs + "/" + name + "/status");
        const auto ppid = status ? status_field(*status, "PPid") : std::nullopt;
        const auto parent = ppid ? sysfs::parse_int(*ppid) : std::nullopt;
        if (parent && is_postgres_comm(procfs, static_cast<int>(*parent))) continue;
        found.push_back(static_cast<int>(*pid));
    }
    std::sort(found.begin(), found.end());
    return found;
}

std::optional<ProcessLimits> read_process_limits(const std::string& procfs, int pid) {
    const std::string dir = procfs + "/" + std::to_string(pid);
    const auto status = sysfs::read_trimmed(dir + "/status");
    if (!status) return std::nullopt;
    ProcessLimits p;
    p.pid = pid;
    if (const auto uid = status_field(*status, "Uid")) {
        // Real, effective, saved, filesystem: the effective one owns the memory.
        std::istringstream ids(*uid);
        long real = -1, eff = -1;
        if (ids >> real >> eff) p.uid = eff;
    }
    if (const auto cap = status_field(*status, "CapEff")) {
        const auto bits = sysfs::parse_int("0x" + *cap);
        p.cap_ipc_lock = bits && ((static_cast<unsigned long long>(*bits) >> kCapIpcLock) & 1);
    }
    if (const auto limits = sysfs::read_trimmed(dir + "/limits"))
        p.limits = parse_memlock_limits(*limits);
    return p;
}

size_t memlock_pool_bytes(const std::string& hugepage_size) {
    tiers::VerbsOptions o;  // the slot counts an instance uses
    o.max_payload = tiers::kVerbsMaxPayload;
    o.hugepage_size = hugepage_size == "1GB"   ? (1ull << 30)
                      : hugepage_size == "2MB" ? (2ull << 20)
                                               : 0;
    return tiers::verbs_pool_bytes(o);
}

CheckResult memlock_check(const tiers::SysRoots& roots, const MemlockCmd& cmd,
                          const std::string& tier) {
    CheckResult c{"memlock", "locked memory", CheckStatus::kSkip, "", ""};
    if (tier != "tier1" && tier != "tier2") {
        c.detail = "the verbs buffer pool is only registered at tier1/tier2; an instance here " +
                   (tier.empty() ? std::string("would not start") : "would run at " + tier);
        return c;
    }
    const uint64_t need = memlock_pool_bytes(cmd.hugepage_size);
    const std::string pages = cmd.hugepage_size == "none" ? "normal" : cmd.hugepage_size;
    const std::string needs = "the verbs buffer pool pins " + mib(need) + " (on " + pages +
                              " pages), plus " + mib(kMemlockHeadroom) + " room for queues";

    // Whose limit: --pid, --pgdata, else every running postmaster (of --user).
    std::vector<int> pids;
    std::string source;
    long want_uid = -1;
    if (!cmd.user.empty()) {
        const passwd* pw = getpwnam(cmd.user.c_str());
        if (pw == nullptr) {
            c.status = CheckStatus::kFail;
            c.detail = "no user " + cmd.user + " on this machine";
            c.action = "name the user the server runs as with --user";
            return c;
        }
        want_uid = static_cast<long>(pw->pw_uid);
    }
    if (cmd.pid > 0) {
        pids.push_back(cmd.pid);
        source = "--pid";
    } else if (!cmd.pgdata.empty()) {
        const auto text = sysfs::read_trimmed(cmd.pgdata + "/postmaster.pid");
        const auto pid = text ? sysfs::parse_int(text->substr(0, text->find('\n'))) : std::nullopt;
        if (!pid || *pid <= 0) {
            c.status = CheckStatus::kFail;
            c.detail = "no postmaster.pid in " + cmd.pgdata + ": the server is not running";
            c.action = "start the server, then run this again";
            return c;
        }
        pids.push_back(static_cast<int>(*pid));
        source = "--pgdata";
    } else {
        pids = find_postmasters(roots.procfs);
    }

    std::vector<std::string> parts{needs};
    CheckStatus worst = CheckStatus::kSkip;
    int seen = 0;
    for (int pid : pids) {
        const auto p = read_process_limits(roots.procfs, pid);
        if (!p) {
            if (source.empty()) continue;  // ended meanwhile
            c.status = CheckStatus::kFail;
            c.detail = "no process " + std::to_string(pid) + " (" + source + ") in " + roots.procfs;
            c.action = "start the server, or name its postmaster's pid";
            return c;
        }
        if (source.empty() && want_uid >= 0 && p->uid != want_uid) continue;
        const CheckStatus s = judge(*p, need);
        if (rank(s) > rank(worst)) worst = s;
        parts.push_back(describe(
            roots, (source.empty() ? "postmaster " : "process ") + std::to_string(pid), *p));
        ++seen;
    }
    if (seen == 0 && roots.live() && geteuid() != 0 &&
        (want_uid < 0 || want_uid == static_cast<long>(geteuid()))) {
        // No server: the limit of this session, which `pg_ctl start` from it passes on.
        rlimit rl{};
        if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
            ProcessLimits self;
            self.uid = static_cast<long>(geteuid());
            self.limits = MemlockLimits{rl.rlim_cur == RLIM_INFINITY ? kUnlimited : rl.rlim_cur,
                                        rl.rlim_max == RLIM_INFINITY ? kUnlimited : rl.rlim_max};
            worst = judge(self, need);
            parts.push_back(describe(roots, "no running postmaster; this session", self) +
                            " (a server started from it inherits that)");
            ++seen;
        }
    }
    if (seen == 0) {
        c.detail = needs + "; no running postmaster" +
                   (cmd.user.empty() ? std::string() : " of user " + cmd.user) +
                   " found: its limit depends on how it is started";
        c.action =
            "start the server and run this again (or --pid/--pgdata); setting the limit: "
            "docs/rdma.md, \"Locked memory\"";
        return c;
    }
    c.status = worst;
    for (size_t i = 0; i < parts.size(); ++i) c.detail += (i ? "; " : "") + parts[i];
    if (worst == CheckStatus::kFail || worst == CheckStatus::kWarn)
        c.action = std::string(worst == CheckStatus::kFail ? "ibv_reg_mr of the pool will fail: "
                                                           : "the queues may not fit: ") +
                   "raise the server's limit: with systemd, LimitMEMLOCK=infinity in "
                   "/etc/systemd/system/postgresql@.service.d/pgrac.conf, then systemctl "
                   "daemon-reload and restart; without, \"postgres - memlock unlimited\" in "
                   "/etc/security/limits.d/pgrac.conf and a new login (docs/rdma.md, \"Locked "
                   "memory\")";
    return c;
}

}  // namespace pgrac::ctl
