// A lock-free log-linear latency histogram in shared memory: any number of
// processes record concurrently with relaxed atomic increments; readers compute
// percentiles from a snapshot. Values are nanoseconds; buckets have 16
// sub-buckets per power of two (relative error under 6.25 %), up to ~18 minutes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pgrac::ic {

struct LatencyHistogram {
    static constexpr int kSubBits = 4;
    static constexpr int kSub = 1 << kSubBits;  // 16
    static constexpr int kMaxExp = 40;          // 2^40 ns
    static constexpr int kBuckets = 2 * kSub + (kMaxExp - kSubBits - 1) * kSub;

    uint64_t buckets[kBuckets];
    uint64_t count;
    uint64_t sum_ns;
    uint64_t max_ns;

    void reset();  // zero everything (not concurrent with record())
    void record(uint64_t ns);
    // Value at quantile q in [0,1], in ns (upper bound of the bucket), 0 if empty.
    uint64_t percentile(double q) const;
    uint64_t total() const;

    static int bucket_of(uint64_t ns);
    static uint64_t bucket_upper(int bucket);
};

}  // namespace pgrac::ic
