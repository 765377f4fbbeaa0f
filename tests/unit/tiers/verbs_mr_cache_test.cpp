// The verbs tier's device-independent pieces: the MR cache (with a fake
// registrar) and the buffer pool. These run everywhere, RDMA device or not.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "tiers/verbs/buffer_pool.hpp"
#include "tiers/verbs/mr_cache.hpp"

using namespace pgrac::tiers;

namespace {

class FakeRegistrar : public MrRegistrar {
  public:
    std::set<void*> live;
    int regs = 0, deregs = 0;
    bool fail = false;
    bool reg(void* addr, size_t, MrHandle* out, std::string* error) override {
        if (fail) {
            *error = "fake failure";
            return false;
        }
        ++regs;
        out->mr = addr;
        out->lkey = static_cast<uint32_t>(regs);
        live.insert(addr);
        return true;
    }
    void dereg(const MrHandle& h) override {
        ++deregs;
        live.erase(h.mr);
    }
};

}  // namespace

TEST(VerbsMrCache, HitsMissesAndLru) {
    FakeRegistrar r;
    std::vector<char> mem(4096);
    std::string error;
    {
        MrCache cache(r, 2);
        const MrHandle* a = cache.acquire(&mem[0], 100, false, &error);
        ASSERT_NE(a, nullptr);
        EXPECT_EQ(cache.acquire(&mem[0], 100, false, &error), a);  // hit
        EXPECT_NE(cache.acquire(&mem[0], 200, false, &error), a);  // other length: other key
        cache.acquire(&mem[0], 100, false, &error);                // hit: now most recent
        cache.acquire(&mem[1000], 100, false, &error);             // evicts {0,200}
        MrCache::Stats s = cache.stats();
        EXPECT_EQ(s.hits, 2u);
        EXPECT_EQ(s.misses, 3u);
        EXPECT_EQ(s.evictions, 1u);
        EXPECT_EQ(s.entries, 2u);
        EXPECT_EQ(r.regs, 3);
        EXPECT_EQ(r.deregs, 1);
        // {0,100} survived the eviction (it was used more recently)
        EXPECT_NE(cache.acquire(&mem[0], 100, false, &error), nullptr);
        EXPECT_EQ(cache.stats().hits, 3u);
    }
    EXPECT_TRUE(r.live.empty());  // the destructor deregisters everything
}

TEST(VerbsMrCache, PinnedEntriesAreNotEvicted) {
    FakeRegistrar r;
    std::vector<char> mem(4096);
    std::string error;
    MrCache cache(r, 1);
    ASSERT_NE(cache.acquire(&mem[0], 64, true, &error), nullptr);
    ASSERT_NE(cache.acquire(&mem[64], 64, false, &error), nullptr);  // over capacity, kept
    EXPECT_EQ(cache.stats().entries, 2u);
    EXPECT_EQ(cache.stats().pinned, 1u);
    cache.unpin(&mem[0], 64);
    ASSERT_NE(cache.acquire(&mem[128], 64, false, &error), nullptr);
    EXPECT_EQ(cache.stats().entries, 1u);
    EXPECT_EQ(cache.stats().evictions, 2u);
}

TEST(VerbsMrCache, FindCoveringAndFailures) {
    FakeRegistrar r;
    std::vector<char> mem(8192);
    std::string error;
    MrCache cache(r, 8);
    ASSERT_NE(cache.acquire(&mem[1024], 4096, false, &error), nullptr);
    const void* base = nullptr;
    size_t len = 0;
    EXPECT_NE(cache.find_covering(&mem[2048], 1024, false, &base, &len), nullptr);
    EXPECT_EQ(base, &mem[1024]);
    EXPECT_EQ(len, 4096u);
    EXPECT_EQ(cache.find_covering(&mem[4096], 2048, false, nullptr, nullptr), nullptr);
    EXPECT_EQ(cache.find_covering(&mem[0], 16, false, nullptr, nullptr), nullptr);
    EXPECT_EQ(cache.stats().hits, 1u);
    r.fail = true;
    EXPECT_EQ(cache.acquire(&mem[0], 16, false, &error), nullptr);
    EXPECT_EQ(error, "fake failure");
    EXPECT_EQ(cache.stats().failures, 1u);
}

// What zero-copy replies rely on: a region is busy from a pinning lookup
// inside it (a posted send) until its unpin (the send's completion).
TEST(VerbsMrCache, PinnedSaysWhetherARegionIsStillRead) {
    FakeRegistrar r;
    std::vector<char> mem(8192);
    std::string error;
    MrCache cache(r, 8);
    ASSERT_NE(cache.acquire(&mem[0], 4096, false, &error), nullptr);
    EXPECT_FALSE(cache.pinned(&mem[0], 4096));
    const void* base = nullptr;
    size_t len = 0;
    ASSERT_NE(cache.find_covering(&mem[24], 2048, true, &base, &len), nullptr);
    EXPECT_TRUE(cache.pinned(&mem[0], 4096));
    EXPECT_FALSE(cache.pinned(&mem[4096], 4096)) << "not registered: not pinned";
    cache.unpin(base, len);
    EXPECT_FALSE(cache.pinned(&mem[0], 4096));
}

namespace {

// 2 MB hugepages the kernel can hand out now: free ones plus the surplus it
// may still allocate (nr_overcommit_hugepages). 0 without hugetlb support.
uint64_t hugepages_2m_available() {
    auto read = [](const char* name) -> uint64_t {
        std::ifstream f(std::string("/sys/kernel/mm/hugepages/hugepages-2048kB/") + name);
        uint64_t v = 0;
        return (f >> v) ? v : 0;
    };
    const uint64_t overcommit = read("nr_overcommit_hugepages"),
                   surplus = read("surplus_hugepages");
    return read("free_hugepages") + (overcommit > surplus ? overcommit - surplus : 0);
}

}  // namespace

// Asks for one 2 MB page more than the kernel can give: the pool falls back to
// normal pages, deterministically, and says why.
TEST(VerbsBufferPool, FallsBackToNormalPagesWhenHugepagesRunOut) {
    const uint64_t available = hugepages_2m_available();
    if (available > 2048) GTEST_SKIP() << available << " hugepages available: too many to exhaust";
    BufferPool pool;
    std::string error;
    const size_t slot = 2u << 20;
    ASSERT_TRUE(pool.create(available + 1, slot, 2u << 20, -1, &error)) << error;
    EXPECT_EQ(pool.page_size(), static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
    EXPECT_EQ(pool.bytes(), (available + 1) * slot);
    EXPECT_NE(pool.warning().find("2 MB hugepages unavailable (2 MB pages: "), std::string::npos)
        << pool.warning();
    EXPECT_NE(pool.warning().find("using 4 KiB pages (reserve hugepages via vm.nr_hugepages)"),
              std::string::npos)
        << pool.warning();
    pool.slot(static_cast<uint32_t>(available))[slot - 1] = 1;  // the last byte is mapped
}

// The outcome this machine allows: 2 MB pages and no warning when one is
// available (the soft-RoCE VM reserves 64), else normal pages and the warning.
TEST(VerbsBufferPool, SlotsAndFallback) {
    const bool huge = hugepages_2m_available() >= 1;
    BufferPool pool;
    std::string error;
    const size_t slot = BufferPool::round_slot(24 + 8192);
    EXPECT_EQ(slot % 64, 0u);
    ASSERT_TRUE(pool.create(10, slot, 2u << 20, -1, &error)) << error;
    EXPECT_GE(pool.bytes(), 10 * slot);
    EXPECT_EQ(pool.bytes() % pool.page_size(), 0u);
    if (huge) {
        EXPECT_EQ(pool.page_size(), 2u << 20);
        EXPECT_TRUE(pool.warning().empty()) << pool.warning();
    } else {
        EXPECT_EQ(pool.page_size(), static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
        EXPECT_NE(pool.warning().find("2 MB hugepages unavailable"), std::string::npos)
            << pool.warning();
    }
    EXPECT_EQ(pool.index_of(pool.slot(3) + 5), 3);
    EXPECT_EQ(pool.index_of(pool.base() + 10 * slot), -1);
    pool.slot(9)[slot - 1] = 1;  // the last byte is mapped

    BufferPool small;
    ASSERT_TRUE(small.create(1, 64, 0, -1, &error));
    EXPECT_TRUE(small.warning().empty());

    SlotList l;
    l.reset(5, 3);
    EXPECT_EQ(l.available(), 3u);
    EXPECT_EQ(l.take(), 5u);
    l.give(5);
    EXPECT_EQ(l.take(), 5u);
    EXPECT_EQ(l.take(), 6u);
    EXPECT_EQ(l.take(), 7u);
    EXPECT_TRUE(l.empty());
}
