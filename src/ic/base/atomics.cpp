// The shared-memory spinlock: test-and-test-and-set with a CPU pause, yielding
// the CPU after a bounded number of spins (on a small machine the holder may
// have been descheduled, and spinning then only delays it).
#include "ic/base/atomics.hpp"

#include <sched.h>

namespace pgrac::ic {

namespace {

constexpr int kSpinsBeforeYield = 128;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

}  // namespace

void spin_lock(uint32_t* lock) {
    int spins = 0;
    for (;;) {
        // Acquire pairs with the release store in spin_unlock().
        if (__atomic_exchange_n(lock, 1u, __ATOMIC_ACQUIRE) == 0) return;
        // Wait with plain loads so the cache line stays shared until it is free.
        while (__atomic_load_n(lock, __ATOMIC_RELAXED) != 0) {
            cpu_relax();
            if (++spins >= kSpinsBeforeYield) {
                sched_yield();
                spins = 0;
            }
        }
    }
}

}  // namespace pgrac::ic
