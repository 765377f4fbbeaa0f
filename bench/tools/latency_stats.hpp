// Latency statistics shared by the benchmark tools (libpq_latency,
// tcp_pingpong): a CLOCK_MONOTONIC clock in ns and the summary of a run's
// round-trip samples that each tool prints (p50/p99/p999/mean in µs).
// Header-only: CMake builds every bench/tools/*.cpp into its own binary.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <vector>

namespace pgrac::bench {

inline uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The q-quantile (nearest rank) of samples sorted ascending, in ns, as µs.
inline double percentile_us(const std::vector<uint64_t>& sorted, double q) {
    const size_t k = static_cast<size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
    return static_cast<double>(sorted[k]) / 1000.0;
}

struct LatencySummary {
    double p50_us, p99_us, p999_us, mean_us;
};

// Summarizes round-trip samples in ns (at least one); sorts them.
inline LatencySummary summarize_latency(std::vector<uint64_t>& samples) {
    double sum = 0;
    for (uint64_t v : samples) sum += static_cast<double>(v);
    std::sort(samples.begin(), samples.end());
    return {percentile_us(samples, 0.5), percentile_us(samples, 0.99),
            percentile_us(samples, 0.999), sum / static_cast<double>(samples.size()) / 1000.0};
}

// Round trips per second: iterations over elapsed_ns.
inline double ops_per_sec(int iterations, uint64_t elapsed_ns) {
    return iterations / (static_cast<double>(elapsed_ns) / 1e9);
}

}  // namespace pgrac::bench
