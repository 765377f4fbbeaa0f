// ShmRing micro-benchmarks: push+pop on one thread (the cost of the ring
// itself), and a producer/consumer pair on two threads (cross-core handoff).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "ic/shm/shm_ring.hpp"

using pgrac::ic::ShmRing;

namespace {

constexpr size_t kRingBytes = 1 << 20;

struct Ring {
    Ring() {
        const size_t bytes = (ShmRing::bytes_needed(kRingBytes) + 63) & ~size_t{63};
        mem = std::aligned_alloc(64, bytes);
        std::memset(mem, 0, bytes);  // fault the pages in before timing
        ring = ShmRing::create(mem, kRingBytes);
    }
    ~Ring() { std::free(mem); }
    void* mem;
    ShmRing ring;
};

void BM_PushPop(benchmark::State& state) {
    Ring r;
    std::vector<uint8_t> body(static_cast<size_t>(state.range(0)), 0x5a);
    for (auto _ : state) {
        if (r.ring.push(body.data(), body.size()) != ShmRing::Push::Ok) {
            state.SkipWithError("push failed");
            break;
        }
        const uint8_t* d;
        size_t n;
        if (!r.ring.peek(&d, &n)) {
            state.SkipWithError("peek failed");
            break;
        }
        benchmark::DoNotOptimize(d[n - 1]);
        r.ring.pop();
    }
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_PushPop)->Arg(64)->Arg(8192);

// The timed thread produces; a second thread consumes (touching every body's
// first and last byte) until it has taken everything.
void BM_ProducerConsumer(benchmark::State& state) {
    Ring r;
    std::vector<uint8_t> body(static_cast<size_t>(state.range(0)), 0x5a);
    uint64_t produced = 0;
    bool done = false;
    std::thread consumer([&] {
        uint64_t taken = 0;
        for (;;) {
            const uint8_t* d;
            size_t n;
            if (r.ring.peek(&d, &n)) {
                benchmark::DoNotOptimize(d[0] + d[n - 1]);
                r.ring.pop();
                taken++;
                continue;
            }
            if (__atomic_load_n(&done, __ATOMIC_ACQUIRE) &&
                taken == __atomic_load_n(&produced, __ATOMIC_RELAXED)) {
                break;
            }
            std::this_thread::yield();
        }
    });
    uint64_t full_spins = 0;
    for (auto _ : state) {
        while (r.ring.push(body.data(), body.size()) != ShmRing::Push::Ok) {
            full_spins++;
            std::this_thread::yield();
        }
        produced++;
    }
    __atomic_store_n(&produced, produced, __ATOMIC_RELAXED);
    __atomic_store_n(&done, true, __ATOMIC_RELEASE);
    consumer.join();
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(state.iterations() * state.range(0));
    state.counters["full_retries"] = static_cast<double>(full_spins);
}
BENCHMARK(BM_ProducerConsumer)->Arg(64)->Arg(8192)->UseRealTime();

}  // namespace
