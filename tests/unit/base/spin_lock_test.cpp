// spin_lock / spin_unlock: mutual exclusion between threads and between
// processes sharing an anonymous mapping.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <new>
#include <thread>
#include <vector>

#include "ic/base/atomics.hpp"

using namespace pgrac::ic;

namespace {

struct Guarded {
    uint32_t lock;
    uint32_t inside;   // threads inside the critical section (must stay <= 1)
    uint64_t counter;  // plain increments, only under the lock
    uint64_t overlaps;
};

void hammer(Guarded* g, int iterations) {
    for (int i = 0; i < iterations; i++) {
        spin_lock(&g->lock);
        // Relaxed RMWs so that an overlap is detected even if it happens.
        if (__atomic_fetch_add(&g->inside, 1u, __ATOMIC_RELAXED) != 0) g->overlaps++;
        g->counter++;
        __atomic_fetch_sub(&g->inside, 1u, __ATOMIC_RELAXED);
        spin_unlock(&g->lock);
    }
}

}  // namespace

TEST(SpinLock, UncontendedLockUnlock) {
    uint32_t lock = 0;
    spin_lock(&lock);
    EXPECT_EQ(lock, 1u);
    spin_unlock(&lock);
    EXPECT_EQ(lock, 0u);
    spin_lock(&lock);
    spin_unlock(&lock);
    EXPECT_EQ(lock, 0u);
}

TEST(SpinLock, ThreadsCountExactly) {
    Guarded g{};
    constexpr int kThreads = 4, kIters = 200000;
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; t++) ts.emplace_back(hammer, &g, kIters);
    for (auto& t : ts) t.join();
    EXPECT_EQ(g.counter, uint64_t{kThreads} * kIters);
    EXPECT_EQ(g.overlaps, 0u);
    EXPECT_EQ(g.lock, 0u);
}

TEST(SpinLock, ProcessesCountExactly) {
    void* mem =
        mmap(nullptr, sizeof(Guarded), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem, MAP_FAILED);
    auto* g = new (mem) Guarded{};
    constexpr int kChildren = 3, kIters = 100000;
    std::vector<pid_t> pids;
    for (int c = 0; c < kChildren; c++) {
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            hammer(g, kIters);
            _exit(0);
        }
        pids.push_back(pid);
    }
    hammer(g, kIters);
    for (pid_t pid : pids) {
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    EXPECT_EQ(g->counter, uint64_t{kChildren + 1} * kIters);
    EXPECT_EQ(g->overlaps, 0u);
    munmap(mem, sizeof(Guarded));
}
