// Detection, tier decision and quick checks against the recorded sysfs/procfs
// trees in tests/data/sysfs (see the README there).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "tiers/detect/rdma_checks.hpp"
#include "tiers/detect/rdma_detect.hpp"
#include "tiers/detect/rdma_live.hpp"
#include "tiers/detect/tier_select.hpp"

using namespace pgrac::tiers;

namespace {

SysRoots roots_of(const std::string& scenario) {
    const std::string base = std::string(PGRAC_SOURCE_DIR) + "/tests/data/sysfs/" + scenario;
    return SysRoots{base + "/sys", base + "/proc"};
}

// id -> status of each quick check, in order.
std::vector<std::pair<std::string, std::string>> statuses(const std::string& scenario,
                                                          const VerifyOptions& opts = {}) {
    const SysRoots roots = roots_of(scenario);
    std::vector<std::pair<std::string, std::string>> out;
    for (const CheckResult& r : run_quick_checks(scan_rdma(roots), roots, opts))
        out.emplace_back(r.id, check_status_name(r.status));
    return out;
}

using Expected = std::vector<std::pair<std::string, std::string>>;

bool has_prefix(const std::vector<std::string>& v, const std::string& prefix) {
    return std::any_of(v.begin(), v.end(),
                       [&](const std::string& s) { return s.rfind(prefix, 0) == 0; });
}

}  // namespace

TEST(RdmaDetect, NoHca) {
    const RdmaInventory inv = scan_rdma(roots_of("no_hca"));
    EXPECT_TRUE(inv.devices.empty());
    ASSERT_EQ(inv.hugepages.size(), 2u);
    EXPECT_EQ(inv.hugepages[0].size_kb, 2048u);
    EXPECT_TRUE(inv.hugepages[0].present);
    EXPECT_EQ(inv.hugepages[0].nr, 0);
    ASSERT_EQ(inv.numa_nodes.size(), 1u);
    EXPECT_EQ(inv.numa_nodes[0].cpus, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(inv.kernel_release, "6.1.0-56-amd64");

    const TierDecision d = decide_tier(inv, "auto", false);
    EXPECT_TRUE(d.ok);
    EXPECT_EQ(d.tier, Tier::Tier3);
    EXPECT_EQ(d.reason, "No RDMA HCA detected; running at Tier 3 (TCP)");

    const TierDecision strict = decide_tier(inv, "auto", true);
    EXPECT_FALSE(strict.ok);
    EXPECT_NE(strict.error.find("No RDMA HCA detected"), std::string::npos);
    EXPECT_NE(strict.error.find("cluster.interconnect_strict"), std::string::npos);

    const TierDecision t1 = decide_tier(inv, "tier1", false);
    EXPECT_TRUE(t1.ok);
    EXPECT_EQ(t1.tier, Tier::Tier3);

    EXPECT_EQ(statuses("no_hca"), (Expected{{"hca", "FAIL"},
                                            {"vendor", "SKIP"},
                                            {"driver", "SKIP"},
                                            {"hugepages", "WARN"},
                                            {"numa", "SKIP"},
                                            {"pfc_ecn", "SKIP"},
                                            {"tier", "WARN"}}));
    const auto issues = quick_verify_issues(roots_of("no_hca"));
    EXPECT_EQ(issues.size(), 3u);
    EXPECT_TRUE(has_prefix(issues, "hca: FAIL: no RDMA device"));
    EXPECT_TRUE(has_prefix(issues, "tier: WARN: tier3: No RDMA HCA detected"));
}

TEST(RdmaDetect, Mlx5InfiniBandGood) {
    const SysRoots roots = roots_of("mlx5_ib_good");
    const RdmaInventory inv = scan_rdma(roots);
    EXPECT_TRUE(inv.errors.empty());
    ASSERT_EQ(inv.devices.size(), 1u);
    const RdmaDevice& d = inv.devices[0];
    EXPECT_EQ(d.name, "mlx5_0");
    EXPECT_EQ(d.vendor, "mlx5");
    EXPECT_EQ(d.driver, "mlx5_core");
    EXPECT_EQ(d.node_type, "CA");
    EXPECT_EQ(d.pci_address, "0000:3b:00.0");
    EXPECT_EQ(d.vendor_id, 0x15b3u);
    EXPECT_EQ(d.device_id, 0x101bu);
    EXPECT_EQ(d.fw_ver, "20.39.1002");
    EXPECT_EQ(d.hca_type, "MT4123");
    EXPECT_FALSE(d.software);
    EXPECT_EQ(d.numa_node, 0);
    EXPECT_EQ(d.uverbs, "uverbs0");
    EXPECT_EQ(d.irqs, (std::vector<int>{98, 99, 100, 101, 102, 103, 104, 105}));
    ASSERT_EQ(d.ports.size(), 1u);
    const RdmaPort& p = d.ports[0];
    EXPECT_TRUE(p.active());
    EXPECT_EQ(p.state, "ACTIVE");
    EXPECT_EQ(p.phys_state, "LinkUp");
    EXPECT_EQ(p.link_layer, LinkLayer::kInfiniBand);
    EXPECT_EQ(p.rate, "200 Gb/sec (4X HDR)");
    EXPECT_EQ(p.lid, 3);
    EXPECT_EQ(p.active_mtu, 0);  // not in sysfs: only verbs knows it
    EXPECT_EQ(inv.uverbs_abi, 6);
    EXPECT_EQ(inv.hugepages[0].nr, 1024);
    EXPECT_EQ(inv.hugepages[0].free, 1000);
    EXPECT_EQ(inv.numa_nodes.size(), 2u);

    const auto aff = read_irq_affinity(roots, d.irqs);
    ASSERT_EQ(aff.size(), 8u);
    EXPECT_TRUE(aff[0].readable);
    EXPECT_EQ(aff[0].cpus, std::vector<int>{0});

    const TierDecision dec = decide_tier(inv, "auto", true);
    EXPECT_TRUE(dec.ok);
    EXPECT_EQ(dec.tier, Tier::Tier1);
    EXPECT_EQ(dec.device, "mlx5_0");
    EXPECT_EQ(dec.port, 1);
    EXPECT_EQ(dec.gid_index, -1);
    EXPECT_EQ(dec.reason,
              "mlx5_0 port 1 is an ACTIVE InfiniBand port; running at Tier 1 (InfiniBand verbs)");

    EXPECT_EQ(statuses("mlx5_ib_good"), (Expected{{"hca", "PASS"},
                                                  {"vendor", "PASS"},
                                                  {"driver", "PASS"},
                                                  {"hugepages", "PASS"},
                                                  {"numa", "PASS"},
                                                  {"pfc_ecn", "SKIP"},
                                                  {"tier", "PASS"}}));
    EXPECT_TRUE(quick_verify_issues(roots).empty());
}

TEST(RdmaDetect, Mlx5RoceWrongNuma) {
    const SysRoots roots = roots_of("mlx5_roce_wrong_numa");
    const RdmaInventory inv = scan_rdma(roots);
    ASSERT_EQ(inv.devices.size(), 1u);
    const RdmaDevice& d = inv.devices[0];
    EXPECT_EQ(d.vendor, "mlx5");
    EXPECT_EQ(d.numa_node, 1);
    ASSERT_EQ(d.ports.size(), 1u);
    const RdmaPort& p = d.ports[0];
    EXPECT_EQ(p.link_layer, LinkLayer::kEthernet);
    // RoCE v2 with the IPv4-mapped address wins over v1 and link-local.
    EXPECT_EQ(p.roce_gid.index, 3);
    EXPECT_EQ(p.roce_gid.type, "RoCE v2");
    EXPECT_TRUE(p.roce_gid.ipv4_mapped);
    EXPECT_EQ(p.roce_gid.netdev, "ens1f0np0");
    EXPECT_EQ(p.ecn_rp_mask, 0x08);
    EXPECT_EQ(p.ecn_np_mask, 0x08);
    EXPECT_EQ(dcqcn_state(p), "enabled (priorities 3)");
    EXPECT_EQ(inv.hugepages[1].size_kb, 1048576u);
    EXPECT_EQ(inv.hugepages[1].free, 4);

    const TierDecision dec = decide_tier(inv, "auto", false);
    EXPECT_EQ(dec.tier, Tier::Tier2);
    EXPECT_EQ(dec.gid_index, 3);
    EXPECT_EQ(dec.link_layer, LinkLayer::kEthernet);

    EXPECT_EQ(statuses("mlx5_roce_wrong_numa"), (Expected{{"hca", "PASS"},
                                                          {"vendor", "PASS"},
                                                          {"driver", "PASS"},
                                                          {"hugepages", "PASS"},
                                                          {"numa", "FAIL"},
                                                          {"pfc_ecn", "WARN"},
                                                          {"tier", "PASS"}}));
    const CheckResult numa = check_numa(inv, roots, &d);
    EXPECT_NE(numa.detail.find("node 1 (CPUs 8-15)"), std::string::npos);
    EXPECT_NE(numa.detail.find("8 entirely off-node"), std::string::npos);
    EXPECT_NE(numa.action.find("pgrac_ctl numa bind-irqs --device mlx5_0"), std::string::npos);
    const CheckResult pfc = check_pfc_ecn(roots, &d, true);
    EXPECT_NE(pfc.detail.find("PFC unknown"), std::string::npos);
    EXPECT_NE(pfc.detail.find("ECN/DCQCN enabled (priorities 3)"), std::string::npos);
    EXPECT_NE(pfc.action.find("switch"), std::string::npos);

    const auto issues = quick_verify_issues(roots);
    EXPECT_EQ(issues.size(), 2u);
    EXPECT_TRUE(has_prefix(issues, "numa: FAIL: mlx5_0 is on node 1"));
    EXPECT_TRUE(has_prefix(issues, "pfc_ecn: WARN:"));

    // Asking for the 1 GB pool: 4 configured and free, still fine.
    VerifyOptions gb;
    gb.hugepage_size_kb = 1048576;
    EXPECT_EQ(check_hugepages(inv, gb.hugepage_size_kb).status, CheckStatus::kPass);
}

TEST(RdmaDetect, NonMlx5) {
    const SysRoots roots = roots_of("non_mlx5");
    const RdmaInventory inv = scan_rdma(roots);
    ASSERT_EQ(inv.devices.size(), 1u);
    const RdmaDevice& d = inv.devices[0];
    EXPECT_EQ(d.name, "bnxt_re0");
    EXPECT_EQ(d.vendor, "other");
    EXPECT_EQ(d.driver, "bnxt_en");
    EXPECT_EQ(d.vendor_id, 0x14e4u);
    EXPECT_EQ(d.ports[0].ecn_rp_mask, -1);
    EXPECT_EQ(dcqcn_state(d.ports[0]), "unknown");
    EXPECT_EQ(decide_tier(inv, "auto", false).tier, Tier::Tier2);

    EXPECT_EQ(statuses("non_mlx5"), (Expected{{"hca", "PASS"},
                                              {"vendor", "PASS"},
                                              {"driver", "PASS"},
                                              {"hugepages", "WARN"},
                                              {"numa", "WARN"},
                                              {"pfc_ecn", "WARN"},
                                              {"tier", "PASS"}}));
    const CheckResult v = check_vendor(&d);
    EXPECT_EQ(v.detail.rfind("other: bnxt_re0", 0), 0u) << v.detail;
    const CheckResult numa = check_numa(inv, roots, &d);
    EXPECT_NE(numa.detail.find("1 of 4 on node 0, 3 spanning other nodes"), std::string::npos)
        << numa.detail;
}

TEST(RdmaDetect, ExplicitTierRequests) {
    const RdmaInventory ib = scan_rdma(roots_of("mlx5_ib_good"));
    const RdmaInventory roce = scan_rdma(roots_of("mlx5_roce_wrong_numa"));

    EXPECT_EQ(decide_tier(ib, "stub", true).tier, Tier::Stub);
    EXPECT_EQ(decide_tier(ib, "tier3", true).tier, Tier::Tier3);
    EXPECT_EQ(decide_tier(ib, "tier1", true).tier, Tier::Tier1);
    EXPECT_EQ(decide_tier(roce, "tier2", true).tier, Tier::Tier2);

    // tier2 asked, only InfiniBand there: runs tier1, or refuses when strict.
    TierDecision d = decide_tier(ib, "tier2", false);
    EXPECT_TRUE(d.ok);
    EXPECT_EQ(d.tier, Tier::Tier1);
    EXPECT_EQ(d.reason.rfind("tier2 requested but no ACTIVE RoCE port", 0), 0u) << d.reason;
    d = decide_tier(ib, "tier2", true);
    EXPECT_FALSE(d.ok);

    d = decide_tier(roce, "tier1", false);
    EXPECT_EQ(d.tier, Tier::Tier2);
    EXPECT_NE(d.reason.find("running at Tier 2"), std::string::npos);

    d = decide_tier(ib, "turbo", false);
    EXPECT_FALSE(d.ok);
    EXPECT_NE(d.error.find("unknown interconnect tier 'turbo'"), std::string::npos);

    d = decide_tier(ib, "auto", false, "mlx5_9");
    EXPECT_EQ(d.tier, Tier::Tier3);
    EXPECT_EQ(d.reason, "RDMA device mlx5_9 not found; running at Tier 3 (TCP)");
}

TEST(RdmaDetect, UnusablePortsGiveTheSpecificReason) {
    RdmaInventory inv;
    RdmaDevice dev;
    dev.name = "mlx5_1";
    dev.node_type = "CA";
    dev.uverbs = "uverbs1";
    RdmaPort p;
    p.num = 1;
    p.state_code = 2;
    p.state = "INIT";
    p.link_layer = LinkLayer::kInfiniBand;
    dev.ports.push_back(p);
    inv.devices.push_back(dev);
    TierDecision d = decide_tier(inv, "auto", false);
    EXPECT_EQ(d.tier, Tier::Tier3);
    EXPECT_EQ(d.reason,
              "No usable RDMA port (mlx5_1 port 1 is INIT (no subnet manager has configured it)); "
              "running at Tier 3 (TCP)");

    // Ethernet, ACTIVE, but only a RoCE v1 GID.
    inv.devices[0].ports[0] = RdmaPort{};
    RdmaPort& e = inv.devices[0].ports[0];
    e.num = 1;
    e.state_code = 4;
    e.state = "ACTIVE";
    e.link_layer = LinkLayer::kEthernet;
    e.roce_gid.index = 0;
    e.roce_gid.type = "IB/RoCE v1";
    d = decide_tier(inv, "auto", false);
    EXPECT_EQ(d.tier, Tier::Tier3);
    EXPECT_NE(d.reason.find("has no RoCE v2 GID"), std::string::npos) << d.reason;

    e.roce_gid.type = "RoCE v2";
    EXPECT_EQ(decide_tier(inv, "auto", false).tier, Tier::Tier2);
    inv.devices[0].uverbs.clear();
    d = decide_tier(inv, "auto", false);
    EXPECT_EQ(d.tier, Tier::Tier3);
    EXPECT_NE(d.reason.find("ib_uverbs"), std::string::npos);

    inv.devices[0].uverbs = "uverbs1";
    inv.devices[0].node_type = "RNIC";
    EXPECT_NE(decide_tier(inv, "auto", false).reason.find("iWARP"), std::string::npos);
}

TEST(RdmaDetect, MissingRootsAreNotAnError) {
    const SysRoots roots{"/nonexistent/sys", "/nonexistent/proc"};
    const RdmaInventory inv = scan_rdma(roots);
    EXPECT_TRUE(inv.devices.empty());
    EXPECT_FALSE(inv.hugepages[0].present);
    EXPECT_TRUE(inv.numa_nodes.empty());
    EXPECT_EQ(decide_tier(inv, "auto", false).reason,
              "No RDMA HCA detected; running at Tier 3 (TCP)");
    EXPECT_FALSE(quick_verify_issues(roots).empty());
}

TEST(RdmaDetect, Cpulist) {
    EXPECT_EQ(parse_cpulist("0-3,8-11"), (std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11}));
    EXPECT_EQ(parse_cpulist("5"), std::vector<int>{5});
    EXPECT_EQ(parse_cpulist(""), std::vector<int>{});
    EXPECT_FALSE(parse_cpulist("3-1").has_value());
    EXPECT_FALSE(parse_cpulist("a").has_value());
    EXPECT_EQ(format_cpulist({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
    EXPECT_EQ(format_cpulist({}), "");
}

TEST(RdmaDetect, RdmaCoreVersionFromLoadedLibrary) {
    const std::string v = rdma_core_version();
    ASSERT_FALSE(v.empty());
    EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(v[0]))) << v;
}

TEST(RdmaDetect, LiveQueryOfAMissingDeviceReportsAnError) {
    const LiveDeviceInfo live = query_device_live("no_such_device0");
    EXPECT_FALSE(live.ok);
    EXPECT_FALSE(live.error.empty());
}

// Live verbs on whatever device this machine has (the soft-RoCE VM has rxe0):
// sysfs and verbs must agree. Skipped where there is none.
TEST(RdmaDetect, LiveDeviceAgreesWithSysfs) {
    const std::vector<std::string> names = verbs_device_names(nullptr);
    if (names.empty()) GTEST_SKIP() << "no RDMA device on this machine";
    RdmaInventory inv = scan_rdma(SysRoots{});
    RdmaDevice* dev = nullptr;
    for (RdmaDevice& d : inv.devices)
        if (d.name == names[0]) dev = &d;
    ASSERT_NE(dev, nullptr) << names[0] << " is in libibverbs' list but not in sysfs";
    const LiveDeviceInfo live = query_device_live(dev->name);
    ASSERT_TRUE(live.ok) << live.error;
    ASSERT_EQ(live.ports.size(), dev->ports.size());
    EXPECT_EQ(live.ports[0].link_layer, dev->ports[0].link_layer);
    EXPECT_EQ(live.ports[0].state_code, dev->ports[0].state_code);
    apply_live_info(*dev, live);
    EXPECT_TRUE(dev->live_queried);
    EXPECT_GE(dev->xrc, 0);
    if (dev->ports[0].active()) {
        EXPECT_GE(dev->ports[0].active_mtu, 256);
    }
    if (dev->software) {
        EXPECT_EQ(dev->xrc, 0);  // rxe and siw have no XRC
    }
}
