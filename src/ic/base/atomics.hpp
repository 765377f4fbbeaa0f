// Atomic access to plain integers that live in shared memory.
// Shared memory holds trivially copyable types only, so instead of std::atomic
// we keep plain fields and touch them through these GCC builtins (lock-free,
// address-free, so they work across processes).
#pragma once

#include <cstdint>

namespace pgrac::ic {

template <typename T>
inline T load_acquire(const T* p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <typename T>
inline T load_relaxed(const T* p) {
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
template <typename T>
inline void store_release(T* p, T v) {
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
template <typename T>
inline void store_relaxed(T* p, T v) {
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
template <typename T>
inline T fetch_add(T* p, T v) {
    return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
}
// Counter bump where only the total matters.
template <typename T>
inline void count(T* p, T v = 1) {
    __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
template <typename T>
inline bool compare_exchange(T* p, T* expected, T desired) {
    return __atomic_compare_exchange_n(p, expected, desired, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}

// Test-and-set spinlock in shared memory (a uint32_t, 0 = free).
// Held only for a few instructions; never across a system call or a copy.
void spin_lock(uint32_t* lock);
inline void spin_unlock(uint32_t* lock) {
    __atomic_store_n(lock, 0u, __ATOMIC_RELEASE);
}

}  // namespace pgrac::ic
