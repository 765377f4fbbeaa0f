// pgrac_ctl end to end: the binary run as a subprocess against the recorded
// trees in tests/data/sysfs, plus a few in-process pieces.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "loopback.hpp"
#include "memlock.hpp"
#include "status.hpp"
#include "table.hpp"
#include "tiers/detect/rdma_checks.hpp"
#include "tiers/detect/rdma_live.hpp"
#include "tiers/detect/tier_select.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kCtl = std::string(PGRAC_BINARY_DIR) + "/bin/pgrac_ctl";
const std::string kData = std::string(PGRAC_SOURCE_DIR) + "/tests/data/sysfs/";

struct CtlRun {
    int rc = -1;
    std::string out, err;
};

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Runs a shell command line; stdout and stderr captured separately.
CtlRun sh(const std::string& cmdline) {
    char errpath[] = "/tmp/pgrac_ctl_test_err_XXXXXX";
    int fd = mkstemp(errpath);
    if (fd >= 0) close(fd);
    CtlRun r;
    FILE* p = popen((cmdline + " 2>" + errpath).c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
    int st = pclose(p);
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.err = slurp(errpath);
    unlink(errpath);
    return r;
}

std::string roots(const std::string& scenario) {
    return "--sysfs-root " + kData + scenario + "/sys --procfs-root " + kData + scenario + "/proc";
}

CtlRun ctl(const std::string& args) {
    return sh(kCtl + " " + args);
}

const std::string kGolden = std::string(PGRAC_SOURCE_DIR) + "/tests/data/ctl/";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
    return s;
}

// A run as a golden file holds it: stdout, stderr if any, the exit code; the
// recorded trees' directory as @DATA@/.
std::string golden_text(const CtlRun& r) {
    std::string s = r.out;
    if (!r.err.empty()) s += "--- stderr ---\n" + r.err;
    s += "--- exit " + std::to_string(r.rc) + " ---\n";
    return replace_all(s, kData, "@DATA@/");
}

// Byte-for-byte comparison with tests/data/ctl/<file>. PGRAC_UPDATE_GOLDEN=1
// rewrites the file instead (review the diff before committing it).
void expect_golden(const std::string& file, const CtlRun& r) {
    const std::string got = golden_text(r);
    const std::string path = kGolden + file;
    if (const char* u = std::getenv("PGRAC_UPDATE_GOLDEN"); u && *u == '1') {
        fs::create_directories(kGolden);
        std::ofstream(path, std::ios::binary) << got;
    }
    ASSERT_TRUE(fs::exists(path)) << path << " is missing; PGRAC_UPDATE_GOLDEN=1 writes it";
    EXPECT_EQ(got, slurp(path)) << "differs from " << path;
}

// RESULT column of a check's row in the table.
std::string table_result(const std::string& out, const std::string& check) {
    std::smatch m;
    std::regex re("(^|\n)" + check + " +(PASS|WARN|FAIL|SKIP) ");
    return std::regex_search(out, m, re) ? m[2].str() : "missing";
}

struct Scenario {
    const char* name;
    int exit_code;
    const char* tier;
    const char* device;  // nullptr: none
    const char* vendor;
    std::vector<std::string>
        results;  // hca vendor driver hugepages numa pfc_ecn memlock loopback tier
};

const std::vector<Scenario> kScenarios = {
    {"no_hca",
     1,
     "tier3",
     nullptr,
     nullptr,
     {"FAIL", "SKIP", "SKIP", "WARN", "SKIP", "SKIP", "SKIP", "SKIP", "WARN"}},
    {"mlx5_ib_good",
     0,
     "tier1",
     "mlx5_0",
     "mlx5",
     {"PASS", "PASS", "PASS", "PASS", "PASS", "SKIP", "PASS", "SKIP", "PASS"}},
    {"mlx5_roce_wrong_numa",
     1,
     "tier2",
     "mlx5_0",
     "mlx5",
     {"PASS", "PASS", "PASS", "PASS", "FAIL", "WARN", "FAIL", "SKIP", "PASS"}},
    {"non_mlx5",
     0,
     "tier2",
     "bnxt_re0",
     "other",
     {"PASS", "PASS", "PASS", "WARN", "WARN", "WARN", "WARN", "SKIP", "PASS"}},
};

const std::vector<std::string> kIds = {"hca",     "vendor",  "driver",   "hugepages", "numa",
                                       "pfc_ecn", "memlock", "loopback", "tier"};
const std::vector<std::string> kNames = {"HCA presence",
                                         "vendor",
                                         "driver and rdma-core",
                                         "hugepages",
                                         "NUMA and IRQ affinity",
                                         "PFC/ECN \\(RoCE\\)",
                                         "locked memory",
                                         "loopback test",
                                         "tier"};

}  // namespace

TEST(CtlVerify, TableForEachScenario) {
    for (const Scenario& s : kScenarios) {
        SCOPED_TRACE(s.name);
        const CtlRun r = ctl(roots(s.name) + " verify rdma");
        EXPECT_EQ(r.rc, s.exit_code) << r.out << r.err;
        for (size_t i = 0; i < kNames.size(); ++i)
            EXPECT_EQ(table_result(r.out, kNames[i]), s.results[i]) << kNames[i] << "\n" << r.out;
        EXPECT_NE(r.out.find(std::string("would run at ") + s.tier), std::string::npos) << r.out;
    }
}

TEST(CtlVerify, JsonForEachScenario) {
    for (const Scenario& s : kScenarios) {
        SCOPED_TRACE(s.name);
        const CtlRun r = ctl(roots(s.name) + " verify rdma --json");
        EXPECT_EQ(r.rc, s.exit_code);
        const nlohmann::json j = nlohmann::json::parse(r.out);
        EXPECT_EQ(j["tier"], s.tier);
        EXPECT_EQ(j["tier_requested"], "auto");
        EXPECT_EQ(j["exit_code"], s.exit_code);
        EXPECT_EQ(j["live"], false);
        EXPECT_TRUE(j["loopback"].is_null());
        if (s.device) {
            EXPECT_EQ(j["device"], s.device);
            EXPECT_EQ(j["vendor"], s.vendor);
        } else {
            EXPECT_TRUE(j["device"].is_null());
        }
        ASSERT_EQ(j["checks"].size(), kIds.size());
        int fails = 0;
        for (size_t i = 0; i < kIds.size(); ++i) {
            EXPECT_EQ(j["checks"][i]["id"], kIds[i]);
            EXPECT_EQ(j["checks"][i]["result"], s.results[i]) << kIds[i];
            EXPECT_FALSE(j["checks"][i]["detail"].get<std::string>().empty());
            if (s.results[i] == "FAIL" || s.results[i] == "WARN") {
                EXPECT_FALSE(j["checks"][i]["action"].get<std::string>().empty()) << kIds[i];
            }
            fails += s.results[i] == "FAIL";
        }
        EXPECT_EQ(j["summary"]["fail"], fails);
    }
    const nlohmann::json j =
        nlohmann::json::parse(ctl(roots("no_hca") + " verify rdma --json").out);
    EXPECT_EQ(j["tier_reason"], "No RDMA HCA detected; running at Tier 3 (TCP)");
    const nlohmann::json roce =
        nlohmann::json::parse(ctl(roots("mlx5_roce_wrong_numa") + " verify rdma --json").out);
    const auto& port = roce["devices"][0]["ports"][0];
    EXPECT_EQ(port["link_layer"], "Ethernet");
    EXPECT_EQ(port["gid_index"], 3);
    EXPECT_EQ(port["gid_type"], "RoCE v2");
    EXPECT_EQ(port["netdev"], "ens1f0np0");
    EXPECT_EQ(port["dcqcn"], "enabled (priorities 3)");
    EXPECT_EQ(roce["devices"][0]["numa_node"], 1);
    EXPECT_EQ(roce["devices"][0]["irqs"].size(), 8u);
}

// The whole output of every command on every recorded tree, against the
// expected files in tests/data/ctl: any change to a check, its wording, the
// table layout or the JSON shows up here.
TEST(CtlGolden, VerifyTable) {
    for (const Scenario& s : kScenarios) {
        SCOPED_TRACE(s.name);
        const CtlRun r = ctl(roots(s.name) + " verify rdma");
        EXPECT_EQ(r.rc, s.exit_code);
        expect_golden(std::string(s.name) + ".verify.txt", r);
    }
}

TEST(CtlGolden, VerifyJson) {
    for (const Scenario& s : kScenarios) {
        SCOPED_TRACE(s.name);
        const CtlRun r = ctl(roots(s.name) + " verify rdma --json");
        EXPECT_EQ(r.rc, s.exit_code);
        expect_golden(std::string(s.name) + ".verify.json", r);
    }
}

TEST(CtlGolden, BindIrqsDryRun) {
    for (const Scenario& s : kScenarios) {
        SCOPED_TRACE(s.name);
        const CtlRun r = ctl(roots(s.name) + " numa bind-irqs --dry-run");
        expect_golden(std::string(s.name) + ".bind-irqs-dry-run.txt", r);
    }
}

TEST(CtlGolden, VerifyWithOptions) {
    expect_golden("mlx5_ib_good.verify-device-mlx5_7.txt",
                  ctl(roots("mlx5_ib_good") + " verify rdma --device mlx5_7"));
    expect_golden("mlx5_ib_good.verify-tier2-strict.txt",
                  ctl(roots("mlx5_ib_good") + " verify rdma --tier tier2 --strict"));
}

// pg_cluster_rdma_status.verify_issues of an instance started on the same
// machine: src/instance/tier_startup.cpp calls quick_verify_issues with these options.
// They must be exactly the WARN/FAIL rows of verify rdma (bar the loopback
// test and the locked-memory limit of running servers, which only pgrac_ctl
// checks), in the same words.
TEST(CtlVerify, SameIssuesAsARunningInstance) {
    for (const Scenario& s : kScenarios) {
        SCOPED_TRACE(s.name);
        pgrac::tiers::SysRoots sr;
        sr.sysfs = kData + s.name + "/sys";
        sr.procfs = kData + s.name + "/proc";
        pgrac::tiers::VerifyOptions opts;  // as tier_startup.cpp sets them
        opts.requested_tier = "auto";
        opts.strict = false;
        opts.device = "";
        opts.query_pfc = false;
        const std::vector<std::string> instance = pgrac::tiers::quick_verify_issues(sr, opts);

        const nlohmann::json j =
            nlohmann::json::parse(ctl(roots(s.name) + " verify rdma --json").out);
        std::vector<std::string> tool;
        for (const auto& c : j["checks"]) {
            const std::string result = c["result"];
            if (c["id"] != "loopback" && c["id"] != "memlock" &&
                (result == "WARN" || result == "FAIL"))
                tool.push_back(c["id"].get<std::string>() + ": " + result + ": " +
                               c["detail"].get<std::string>());
        }
        EXPECT_EQ(instance, tool);
        // Only the good InfiniBand box has nothing to report.
        EXPECT_EQ(instance.empty(), std::string(s.name) == "mlx5_ib_good");
    }
}

TEST(CtlVerify, DeviceStrictAndTierOptions) {
    CtlRun r = ctl(roots("mlx5_ib_good") + " verify rdma --device mlx5_7 --json");
    EXPECT_EQ(r.rc, 1);
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["checks"][0]["result"], "FAIL");
    EXPECT_NE(j["checks"][0]["detail"].get<std::string>().find("no RDMA device named mlx5_7"),
              std::string::npos);
    EXPECT_EQ(j["tier"], "tier3");

    // tier2 asked on an InfiniBand-only box: strict refuses, the tier check fails.
    r = ctl(roots("mlx5_ib_good") + " verify rdma --tier tier2 --strict --json");
    EXPECT_EQ(r.rc, 1);
    j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j["tier"].is_null());
    EXPECT_EQ(j["checks"].back()["result"], "FAIL");
    r = ctl(roots("mlx5_ib_good") + " verify rdma --tier tier2 --json");
    j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tier"], "tier1");
    EXPECT_EQ(j["checks"].back()["result"], "WARN");
    EXPECT_EQ(r.rc, 0);
}

// The locked-memory check reads the postmasters' /proc/<pid>/limits in the
// recorded trees: unlimited or CAP_IPC_LOCK pass, 8 MiB fails, the bare pool
// warns; --pid, --pgdata, --user and --hugepage-size choose what is checked.
TEST(CtlVerify, MemlockOfTheRunningServer) {
    auto memlock = [](const std::string& scenario, const std::string& opts) {
        const CtlRun r = ctl(roots(scenario) + " verify rdma --json " + opts);
        const nlohmann::json j = nlohmann::json::parse(r.out);
        for (const auto& c : j["checks"])
            if (c["id"] == "memlock") return c;
        return nlohmann::json();
    };
    auto has = [](const nlohmann::json& c, const std::string& text) {
        return c["detail"].get<std::string>().find(text) != std::string::npos;
    };
    // Pool: 768 slots of 66624 bytes = 51167232 bytes, 25 pages of 2 MB.
    EXPECT_EQ(pgrac::ctl::memlock_pool_bytes("2MB"), 25u * (2u << 20));
    EXPECT_EQ(pgrac::ctl::memlock_pool_bytes("none"), 768u * 66624u);
    EXPECT_EQ(pgrac::ctl::memlock_pool_bytes("1GB"), 1u << 30);

    // Every postmaster; the backend (a child of one) is not one.
    nlohmann::json c = memlock("mlx5_ib_good", "");
    EXPECT_EQ(c["result"], "PASS");
    EXPECT_TRUE(has(c, "postmaster 4242 (uid 109): soft limit unlimited")) << c;
    EXPECT_TRUE(has(c, "postmaster 5151 (uid 110): has CAP_IPC_LOCK")) << c;
    EXPECT_FALSE(has(c, "4250")) << c;
    EXPECT_EQ(pgrac::ctl::find_postmasters(kData + "mlx5_ib_good/proc"),
              (std::vector<int>{4242, 5151}));

    c = memlock("mlx5_roce_wrong_numa", "");
    EXPECT_EQ(c["result"], "FAIL");
    EXPECT_TRUE(has(c, "postmaster 3100 (uid 109): soft limit 8.0 MiB")) << c;
    EXPECT_NE(c["action"].get<std::string>().find(
                  "LimitMEMLOCK=infinity in /etc/systemd/system/postgresql@.service.d/pgrac.conf"),
              std::string::npos);
    EXPECT_NE(c["action"].get<std::string>().find("/etc/security/limits.d/pgrac.conf"),
              std::string::npos);

    c = memlock("non_mlx5", "");  // 50 MiB: the pool fits, no room for the queues
    EXPECT_EQ(c["result"], "WARN");
    EXPECT_EQ(memlock("non_mlx5", "--hugepage-size 1GB")["result"], "FAIL");
    c = memlock("non_mlx5", "--hugepage-size none");  // 48.8 MiB + 4 MiB > 50 MiB
    EXPECT_EQ(c["result"], "WARN");
    EXPECT_TRUE(has(c, "pins 48.8 MiB (on normal pages)")) << c;

    EXPECT_EQ(memlock("no_hca", "")["result"], "SKIP");  // tier3: no pool

    // --pid: any process; --pgdata: the pid in postmaster.pid.
    c = memlock("mlx5_ib_good", "--pid 4250");
    EXPECT_EQ(c["result"], "FAIL");
    EXPECT_TRUE(has(c, "process 4250 (uid 109): soft limit 8.0 MiB")) << c;
    c = memlock("mlx5_ib_good", "--pid 99999");
    EXPECT_EQ(c["result"], "FAIL");
    EXPECT_TRUE(has(c, "no process 99999 (--pid)")) << c;
    char dir[] = "/tmp/pgrac_ctl_pgdata_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    EXPECT_EQ(memlock("mlx5_ib_good", std::string("--pgdata ") + dir)["result"], "FAIL");
    std::ofstream(std::string(dir) + "/postmaster.pid") << "4242\n/var/lib/postgresql/15/main\n";
    c = memlock("mlx5_ib_good", std::string("--pgdata ") + dir);
    EXPECT_EQ(c["result"], "PASS");
    EXPECT_TRUE(has(c, "process 4242 (uid 109)")) << c;
    fs::remove_all(dir);
    EXPECT_EQ(ctl(roots("mlx5_ib_good") + " verify rdma --pid 1 --pgdata /tmp").rc, 2);

    // --user: only that user's postmasters (none of root's in the tree); an unknown user fails.
    c = memlock("mlx5_ib_good", "--user root");
    EXPECT_EQ(c["result"], "SKIP");
    EXPECT_TRUE(has(c, "no running postmaster of user root found")) << c;
    EXPECT_EQ(memlock("mlx5_ib_good", "--user no_such_user_pgrac")["result"], "FAIL");
}

TEST(CtlVerify, ParsesTheLockedMemoryLimit) {
    using pgrac::ctl::kUnlimited;
    const std::string head =
        "Limit                     Soft Limit           Hard Limit           Units\n";
    auto lim = pgrac::ctl::parse_memlock_limits(
        head + "Max locked memory         8388608              unlimited            bytes\n");
    ASSERT_TRUE(lim);
    EXPECT_EQ(lim->soft, 8388608u);
    EXPECT_EQ(lim->hard, kUnlimited);
    lim = pgrac::ctl::parse_memlock_limits(
        head + "Max locked memory         unlimited            unlimited            bytes\n");
    ASSERT_TRUE(lim);
    EXPECT_EQ(lim->soft, kUnlimited);
    EXPECT_FALSE(pgrac::ctl::parse_memlock_limits(head + "Max open files 1024 4096 files\n"));
    EXPECT_FALSE(pgrac::ctl::parse_memlock_limits("Max locked memory         lots   x  bytes\n"));
}

TEST(CtlUsage, ExitCodesAndHelp) {
    EXPECT_EQ(ctl("").rc, 2);
    EXPECT_EQ(ctl("verify").rc, 2);
    EXPECT_EQ(ctl("numa").rc, 2);
    EXPECT_EQ(ctl("frobnicate").rc, 2);
    EXPECT_EQ(ctl("verify rdma --no-such-option").rc, 2);
    EXPECT_EQ(ctl("verify rdma --tier tier9").rc, 2);
    EXPECT_EQ(ctl("--sysfs-root /nonexistent/dir verify rdma").rc, 2);
    for (const char* cmd : {"--help", "verify --help", "verify rdma --help", "numa --help",
                            "numa bind-irqs --help", "status --help"}) {
        const CtlRun r = ctl(cmd);
        EXPECT_EQ(r.rc, 0) << cmd;
        EXPECT_NE(r.out.find("Usage:"), std::string::npos) << cmd;
    }
    EXPECT_NE(ctl("verify rdma --help").out.find("--device"), std::string::npos);
    EXPECT_NE(ctl("numa bind-irqs --help").out.find("--dry-run"), std::string::npos);
    EXPECT_NE(ctl("status --help").out.find("-h,--host"), std::string::npos);
    EXPECT_NE(ctl("--help").out.find("--sysfs-root"), std::string::npos);
}

TEST(CtlBindIrqs, DryRunShowsTheChanges) {
    CtlRun r = ctl(roots("mlx5_roce_wrong_numa") + " numa bind-irqs --dry-run");
    EXPECT_EQ(r.rc, 0) << r.err;
    std::string expected = "mlx5_0: NUMA node 1, CPUs 8-15; 8 IRQs (dry run: nothing is written)\n";
    for (int irq = 130; irq <= 137; ++irq)
        expected += "IRQ " + std::to_string(irq) + ": " + std::to_string(irq - 130) + " -> " +
                    std::to_string(irq - 130 + 8) + " (would change)\n";
    expected += "8 would change, 0 already on node 1\n";
    EXPECT_EQ(r.out, expected);
    EXPECT_EQ(slurp(kData + "mlx5_roce_wrong_numa/proc/irq/130/smp_affinity_list"), "0\n");

    // One CPU each, all on the HCA's node already: nothing to do.
    r = ctl(roots("mlx5_ib_good") + " numa bind-irqs --dry-run --device mlx5_0");
    EXPECT_EQ(r.rc, 0);
    EXPECT_NE(r.out.find("IRQ 98: 0 (already on node 0)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("0 would change, 8 already on node 0"), std::string::npos) << r.out;

    r = ctl(roots("non_mlx5") + " numa bind-irqs --dry-run");
    EXPECT_EQ(r.rc, 0);
    EXPECT_NE(r.out.find("IRQ 62: 0-3 (already on node 0)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("IRQ 60: 0-7 -> 0 (would change)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("IRQ 61: 0-7 -> 1 (would change)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("IRQ 63: 0-7 -> 2 (would change)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("3 would change, 1 already on node 0"), std::string::npos) << r.out;

    r = ctl(roots("no_hca") + " numa bind-irqs --dry-run");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("no RDMA device"), std::string::npos);
    r = ctl(roots("mlx5_ib_good") + " numa bind-irqs --dry-run --device mlx5_3");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("no RDMA device named mlx5_3"), std::string::npos);
}

TEST(CtlBindIrqs, WritesACopyOfTheTree) {
    if (geteuid() != 0) GTEST_SKIP() << "writing needs root (the tool refuses otherwise)";
    char tmpl[] = "/tmp/pgrac_ctl_tree_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    fs::copy(kData + "mlx5_roce_wrong_numa", dir,
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    fs::remove_all(dir + "/proc/3100");  // its postmaster's 8 MiB limit would fail verify
    const std::string args = "--sysfs-root " + dir + "/sys --procfs-root " + dir + "/proc";

    CtlRun r = ctl(args + " numa bind-irqs");
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("IRQ 130: 0 -> 8 (changed)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("8 changed, 0 already on node 1"), std::string::npos) << r.out;
    for (int irq = 130; irq <= 137; ++irq)
        EXPECT_EQ(slurp(dir + "/proc/irq/" + std::to_string(irq) + "/smp_affinity_list"),
                  std::to_string(irq - 130 + 8) + "\n");

    // Now the NUMA check passes, and a second run changes nothing.
    const nlohmann::json j = nlohmann::json::parse(ctl(args + " verify rdma --json").out);
    EXPECT_EQ(j["checks"][4]["result"], "PASS");
    EXPECT_EQ(j["exit_code"], 0);
    r = ctl(args + " numa bind-irqs");
    EXPECT_NE(r.out.find("0 changed, 8 already on node 1"), std::string::npos) << r.out;
    fs::remove_all(dir);
}

TEST(CtlBindIrqs, RefusesWithoutRoot) {
    if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0)
        GTEST_SKIP() << "needs root and setpriv to drop to an unprivileged uid";
    const CtlRun r = sh("/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups " + kCtl +
                        " " + roots("mlx5_roce_wrong_numa") + " numa bind-irqs");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("must run as root"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--dry-run"), std::string::npos) << r.err;
    EXPECT_EQ(slurp(kData + "mlx5_roce_wrong_numa/proc/irq/130/smp_affinity_list"), "0\n");
}

TEST(CtlStatus, ConnectionFailureIsReported) {
    const CtlRun r = ctl("status -h 127.0.0.1 -p 1 -d postgres -U postgres");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("cannot connect"), std::string::npos) << r.err;
}

// The views as sql/pgrac_ic--0.1.0.sql defines them: view -> its columns
// (name, type), from the OUT parameters of the function it selects from.
using SqlColumns = std::vector<std::pair<std::string, std::string>>;
std::map<std::string, SqlColumns> sql_views() {
    const std::string sql = slurp(std::string(PGRAC_SOURCE_DIR) + "/sql/pgrac_ic--0.1.0.sql");
    std::map<std::string, SqlColumns> fns, views;
    const std::regex fn_re(R"(CREATE FUNCTION (\w+)\(([^)]*)\))");
    for (std::sregex_iterator it(sql.begin(), sql.end(), fn_re), end; it != end; ++it) {
        SqlColumns cols;
        std::stringstream params((*it)[2].str());
        std::string p;
        while (std::getline(params, p, ',')) {
            std::smatch m;
            static const std::regex out_re(R"(^\s*OUT\s+(\w+)\s+(.*?)\s*$)");
            if (std::regex_match(p, m, out_re)) cols.emplace_back(m[1], m[2]);
        }
        fns[(*it)[1]] = cols;
    }
    const std::regex view_re(R"(CREATE VIEW (\w+) AS SELECT \* FROM (\w+)\(\))");
    for (std::sregex_iterator it(sql.begin(), sql.end(), view_re), end; it != end; ++it)
        views[(*it)[1]] = fns[(*it)[2]];
    return views;
}

// status reads its columns by name, and every one of them exists in the
// extension's SQL (a renamed or dropped column fails here, not in the field).
TEST(CtlStatus, QueriesNamedColumnsOfTheExtensionsViews) {
    const auto views = sql_views();
    ASSERT_EQ(views.count("pg_cluster_ic_peers"), 1u);
    for (const pgrac::ctl::StatusView& v : pgrac::ctl::status_views()) {
        SCOPED_TRACE(v.name);
        ASSERT_EQ(views.count(v.name), 1u);
        const SqlColumns& cols = views.at(v.name);
        for (const pgrac::ctl::StatusColumn& c : v.columns) {
            const bool found = std::any_of(cols.begin(), cols.end(),
                                           [&](const auto& sc) { return sc.first == c.name; });
            EXPECT_TRUE(found) << c.name << " is not a column of " << v.name;
        }
        const std::string q = pgrac::ctl::status_query(v);
        EXPECT_EQ(q.find('*'), std::string::npos) << q;
        EXPECT_NE(q.find(std::string(" FROM ") + v.name), std::string::npos) << q;
    }
    // The columns other engineers added are read too.
    const auto& peers = pgrac::ctl::status_views()[1];
    EXPECT_NE(pgrac::ctl::status_query(peers).find("notes_recv"), std::string::npos);
}

// A scratch PostgreSQL with stand-in views built from the extension's SQL
// (same names, columns and types, plus a column pgrac_ctl does not know): proves
// the libpq path, the table and JSON. The real views are checked in TAP
// (t/010_tcp_cluster.pl).
TEST(CtlStatus, ReadsTheViewsOfARunningServer) {
    const std::string bin = "/usr/lib/postgresql/15/bin";
    if (geteuid() != 0 || access((bin + "/initdb").c_str(), X_OK) != 0 ||
        access("/usr/bin/setpriv", X_OK) != 0 || sh("id -u postgres").rc != 0)
        GTEST_SKIP() << "needs root, setpriv, a postgres user and PostgreSQL 15 binaries";
    char tmpl[] = "/tmp/pgrac_ctl_pg_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    const std::string port = std::to_string(20000 + getpid() % 20000);
    const std::string as_pg = "/usr/bin/setpriv --reuid=postgres --regid=postgres --init-groups ";
    ASSERT_EQ(sh("chown postgres " + dir).rc, 0);
    ASSERT_EQ(sh(as_pg + bin + "/initdb -N -A trust -U postgres -D " + dir + "/data >/dev/null").rc,
              0);
    // Stops the server and removes its directory however the test ends (a
    // failed ASSERT returns early).
    struct ScratchServer {
        std::string stop, dir;
        ~ScratchServer() {
            sh(stop);
            fs::remove_all(dir);
        }
    } scratch{as_pg + bin + "/pg_ctl -s -D " + dir + "/data -m immediate stop", dir};
    ASSERT_EQ(sh(as_pg + bin + "/pg_ctl -w -s -D " + dir + "/data -l " + dir + "/log -o \"-p " +
                 port + " -k " + dir + " -c listen_addresses=''\" start")
                  .rc,
              0);

    // Per view, the rows: column -> SQL literal; the rest are NULL.
    using Row = std::map<std::string, std::string>;
    const std::map<std::string, std::vector<Row>> values = {
        {"pg_cluster_rdma_status",
         {{{"node_id", "1"},
           {"cluster_name", "'c1'"},
           {"tier", "'tier2'"},
           {"tier_requested", "'auto'"},
           {"tier_reason", "'rxe0 port 1 is an ACTIVE Ethernet port'"},
           {"strict", "false"},
           {"listener_ready", "true"},
           {"hca_name", "'rxe0'"},
           {"hca_vendor", "'other'"},
           {"link_layer", "'Ethernet'"},
           {"xrc", "'no'"},
           {"dcqcn", "'unknown'"},
           {"hugepage_size", "'2MB'"},
           {"numa_node", "0"},
           {"cq_depth", "4096"},
           {"verify_issues",
            "ARRAY['vendor: WARN: other: rxe0 is soft-RoCE', 'hugepages: WARN: 2 MB: none "
            "configured']"}}}},
        {"pg_cluster_ic_peers",
         {{{"node_id", "1"},
           {"address", "'10.0.0.1:5433'"},
           {"is_self", "true"},
           {"state", "'UP'"},
           {"tier", "'tier2'"},
           {"incarnation", "7"},
           {"rtt_us", "12.5"},
           {"notes_recv", "3"}},
          {{"node_id", "2"},
           {"address", "'10.0.0.2:5433'"},
           {"is_self", "false"},
           {"state", "'DOWN'"},
           {"tier", "'tier2'"},
           {"incarnation", "3"},
           {"notes_recv", "0"},
           {"last_error", "'connection refused'"}}}},
        {"pg_cluster_rdma_counters",
         {{{"peer_node_id", "2"},
           {"msgs_sent", "10"},
           {"msgs_recv", "9"},
           {"bytes_sent", "640"},
           {"bytes_recv", "576"},
           {"p50_latency_us", "5.5"},
           {"p99_latency_us", "9.25"}},
          {{"msgs_sent", "10"},
           {"msgs_recv", "9"},
           {"bytes_sent", "640"},
           {"bytes_recv", "576"},
           {"p50_latency_us", "5.5"},
           {"p99_latency_us", "9.25"}}}},
    };
    std::string sql;
    for (const auto& [view, cols] : sql_views()) {
        if (!values.count(view)) continue;
        std::string body;
        for (const Row& row : values.at(view)) {
            body += body.empty() ? "SELECT " : " UNION ALL SELECT ";
            for (const auto& [name, type] : cols) {
                auto it = row.find(name);
                body +=
                    (it == row.end() ? "NULL" : it->second) + "::" + type + " AS " + name + ", ";
            }
            body += "'ignored'::text AS future_col";  // a column added later
        }
        sql += "CREATE VIEW " + view + " AS " + body + ";\n";
    }
    const std::string sql_file = dir + "/views.sql";
    std::ofstream(sql_file) << sql;
    EXPECT_EQ(sh(bin + "/psql -q -X -v ON_ERROR_STOP=1 -h " + dir + " -p " + port +
                 " -U postgres -d postgres -f " + sql_file)
                  .rc,
              0)
        << sql;

    const std::string conn = " -h " + dir + " -p " + port + " -U postgres -d postgres";
    auto scrub = [&](CtlRun r) {  // the scratch server's socket dir and port
        r.out = replace_all(replace_all(r.out, dir, "@HOST@"), "\"" + port + "\"", "\"@PORT@\"");
        r.out = replace_all(r.out, ":" + port + " ", ":@PORT@ ");
        return r;
    };
    CtlRun r = ctl("status" + conn + " --json");
    EXPECT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["rdma_status"]["tier"], "tier2");
    EXPECT_EQ(j["rdma_status"]["strict"], false);
    EXPECT_EQ(j["rdma_status"]["cq_depth"], 4096);
    EXPECT_EQ(j["rdma_status"]["verify_issues"],
              nlohmann::json::array({"vendor: WARN: other: rxe0 is soft-RoCE",
                                     "hugepages: WARN: 2 MB: none configured"}));
    ASSERT_EQ(j["peers"].size(), 2u);
    EXPECT_EQ(j["peers"][0]["state"], "UP");
    EXPECT_EQ(j["peers"][0]["rtt_us"], 12.5);
    EXPECT_EQ(j["peers"][0]["notes_recv"], 3);
    EXPECT_TRUE(j["peers"][1]["rtt_us"].is_null());
    EXPECT_EQ(j["counters"][0]["bytes_sent"], 640);
    EXPECT_TRUE(j["counters"][1]["peer_node_id"].is_null());
    EXPECT_EQ(r.out.find("future_col"), std::string::npos) << r.out;
    expect_golden("status.json", scrub(r));

    r = ctl("status" + conn);
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out.find("future_col"), std::string::npos) << r.out;
    expect_golden("status.txt", scrub(r));

    // A database without the views: a clear error and exit 1.
    EXPECT_EQ(sh(bin + "/psql -q -X -h " + dir + " -p " + port +
                 " -U postgres -d postgres -c 'CREATE DATABASE empty'")
                  .rc,
              0);
    r = ctl("status -h " + dir + " -p " + port + " -U postgres -d empty");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("CREATE EXTENSION pgrac_ic"), std::string::npos) << r.err;
    // Views of an older extension, without most columns pgrac_ctl reads: it
    // shows what there is and lists what is missing.
    EXPECT_EQ(sh(bin + "/psql -q -X -h " + dir + " -p " + port +
                 " -U postgres -d empty -c \"CREATE VIEW pg_cluster_rdma_status AS SELECT 1 AS "
                 "node_id, 'tier3'::text AS tier; CREATE VIEW pg_cluster_ic_peers AS SELECT 1 AS "
                 "node_id, 'UP'::text AS state; CREATE VIEW pg_cluster_rdma_counters AS SELECT "
                 "1 AS peer_node_id\"")
                  .rc,
              0);
    r = ctl("status -h " + dir + " -p " + port + " -U postgres -d empty --json");
    EXPECT_EQ(r.rc, 0) << r.err;
    const nlohmann::json old = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(old.is_discarded()) << r.out;
    EXPECT_EQ(old["rdma_status"], nlohmann::json({{"node_id", 1}, {"tier", "tier3"}}));
    EXPECT_EQ(old["peers"][0]["state"], "UP");
    EXPECT_EQ(old["missing_columns"]["peers"][0], "address");
    EXPECT_EQ(old["missing_columns"]["counters"][0], "msgs_sent");
    r = ctl("status -h " + dir + " -p " + port + " -U postgres -d empty");
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("tier3"), std::string::npos) << r.out;
}

TEST(CtlTable, WrapsTheLastColumn) {
    EXPECT_EQ(pgrac::ctl::wrap_text("aaa bbb ccc", 7),
              (std::vector<std::string>{"aaa bbb", "ccc"}));
    EXPECT_EQ(pgrac::ctl::wrap_text("", 7), std::vector<std::string>{""});
    EXPECT_EQ(pgrac::ctl::wrap_text("abcdefghij", 8), (std::vector<std::string>{"abcdefgh", "ij"}));
    EXPECT_EQ(pgrac::ctl::display_width("5 µs"), 4u);
    pgrac::ctl::Table t({"A", "B"});
    t.add_row({"x", "one two three"});
    std::ostringstream out;
    t.print(out, 23);
    EXPECT_EQ(out.str(), "A  B\nx  one two three\n");
}

// The loopback test itself, on whatever device this machine has (rxe0 in the
// soft-RoCE VM). Skipped where there is none.
TEST(CtlLoopback, RunsOnARealDevice) {
    const auto names = pgrac::tiers::verbs_device_names(nullptr);
    if (names.empty()) GTEST_SKIP() << "no RDMA device on this machine";
    const auto inv = pgrac::tiers::scan_rdma(pgrac::tiers::SysRoots{});
    const auto d = pgrac::tiers::decide_tier(inv, "auto", false, names[0]);
    if (d.tier != pgrac::tiers::Tier::Tier1 && d.tier != pgrac::tiers::Tier::Tier2)
        GTEST_SKIP() << d.reason;
    pgrac::ctl::LoopbackOptions o;
    o.device = d.device;
    o.port = d.port;
    o.gid_index = d.tier == pgrac::tiers::Tier::Tier2 ? d.gid_index : -1;
    o.lat_iters = 200;
    o.bw_iters = 64;
    const pgrac::ctl::LoopbackResult r = pgrac::ctl::run_loopback(o);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_GT(r.lat_us_per_iter, 0);
    EXPECT_GT(r.bw_mb_per_s, 0);
    EXPECT_GE(r.path_mtu, 256);

    // A port that does not exist fails cleanly, with the reason.
    o.port = 9;
    const pgrac::ctl::LoopbackResult bad = pgrac::ctl::run_loopback(o);
    EXPECT_FALSE(bad.ok);
    EXPECT_FALSE(bad.error.empty());
}
