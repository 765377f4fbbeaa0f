// LatencyHistogram: bucket boundaries, percentile accuracy against exact
// nearest-rank percentiles, and concurrent recording.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "ic/base/latency_histogram.hpp"

using namespace pgrac::ic;
using H = LatencyHistogram;

namespace {

std::unique_ptr<H> fresh() {
    auto h = std::make_unique<H>();
    h->reset();
    return h;
}

uint64_t exact_percentile(std::vector<uint64_t> v, double q) {
    std::sort(v.begin(), v.end());
    size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    if (rank == 0) rank = 1;
    return v[rank - 1];
}

void expect_close(const std::vector<uint64_t>& values, const char* what) {
    auto h = fresh();
    for (uint64_t v : values) h->record(v);
    for (double q : {0.0, 0.01, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1.0}) {
        const uint64_t want = exact_percentile(values, q);
        const uint64_t got = h->percentile(q);
        // The histogram reports the top of the bucket: never below the true
        // value, and less than 1/16 above it.
        EXPECT_GE(got, want) << what << " q=" << q;
        EXPECT_LE(static_cast<double>(got - want), 0.0625 * static_cast<double>(want))
            << what << " q=" << q << " want " << want << " got " << got;
    }
}

}  // namespace

TEST(Histogram, LinearRangeIsExact) {
    for (uint64_t v = 0; v < 2 * H::kSub; v++) {
        EXPECT_EQ(H::bucket_of(v), static_cast<int>(v));
        EXPECT_EQ(H::bucket_upper(static_cast<int>(v)), v);
    }
    // First log bucket: 32 and 33 share a bucket (width 2).
    EXPECT_EQ(H::bucket_of(32), 32);
    EXPECT_EQ(H::bucket_of(33), 32);
    EXPECT_EQ(H::bucket_of(34), 33);
    EXPECT_EQ(H::bucket_upper(32), 33u);
    EXPECT_EQ(H::bucket_of(63), 47);
    EXPECT_EQ(H::bucket_of(64), 48);
    EXPECT_EQ(H::bucket_upper(47), 63u);
}

TEST(Histogram, BucketsTileTheRange) {
    // Every bucket starts right after the previous one ends, widths grow by
    // powers of two, and each is at most 1/16 of its lower bound wide.
    uint64_t prev_upper = H::bucket_upper(0);
    for (int b = 1; b < H::kBuckets; b++) {
        const uint64_t lower = prev_upper + 1;
        const uint64_t upper = H::bucket_upper(b);
        ASSERT_GE(upper, lower) << b;
        ASSERT_EQ(H::bucket_of(lower), b);
        ASSERT_EQ(H::bucket_of(upper), b);
        if (b >= 2 * H::kSub) {
            ASSERT_LE(static_cast<double>(upper - lower + 1), lower / 16.0) << b;
        }
        prev_upper = upper;
    }
    EXPECT_EQ(prev_upper, (uint64_t{1} << H::kMaxExp) - 1);
}

TEST(Histogram, PowersOfTwoAndClamp) {
    for (int e = 5; e < H::kMaxExp; e++) {
        const uint64_t p = uint64_t{1} << e;
        EXPECT_EQ(H::bucket_of(p), H::bucket_of(p - 1) + 1) << e;
        EXPECT_EQ(H::bucket_upper(H::bucket_of(p) - 1), p - 1) << e;
    }
    const int last = H::kBuckets - 1;
    EXPECT_EQ(H::bucket_of((uint64_t{1} << H::kMaxExp) - 1), last);
    EXPECT_EQ(H::bucket_of(uint64_t{1} << H::kMaxExp), last);
    EXPECT_EQ(H::bucket_of(UINT64_MAX), last);
}

TEST(Histogram, EmptyAndSingle) {
    auto h = fresh();
    EXPECT_EQ(h->percentile(0.5), 0u);
    EXPECT_EQ(h->total(), 0u);
    h->record(1000);
    EXPECT_EQ(h->total(), 1u);
    EXPECT_EQ(h->sum_ns, 1000u);
    EXPECT_EQ(h->max_ns, 1000u);
    // max_ns lies in the bucket, so it is reported exactly.
    EXPECT_EQ(h->percentile(0.0), 1000u);
    EXPECT_EQ(h->percentile(0.5), 1000u);
    EXPECT_EQ(h->percentile(1.0), 1000u);
    EXPECT_EQ(h->percentile(2.0), 1000u);   // clamped q
    EXPECT_EQ(h->percentile(-1.0), 1000u);  // clamped q
    EXPECT_EQ(h->percentile(NAN), 1000u);
}

TEST(Histogram, ClampedValuesReportMax) {
    auto h = fresh();
    const uint64_t huge = uint64_t{1} << 45;  // beyond the last bucket
    h->record(10);
    h->record(huge);
    EXPECT_EQ(h->buckets[H::kBuckets - 1], 1u);
    EXPECT_EQ(h->percentile(1.0), huge);
    EXPECT_EQ(h->percentile(0.5), 10u);
}

TEST(Histogram, PercentilesOnKnownDistributions) {
    std::vector<uint64_t> uniform;
    for (uint64_t v = 1; v <= 100000; v++) uniform.push_back(v * 7);
    expect_close(uniform, "uniform");

    std::mt19937_64 rng(7);
    std::exponential_distribution<double> expo(1.0 / 20000.0);  // mean 20 us
    std::vector<uint64_t> ex;
    for (int i = 0; i < 200000; i++) ex.push_back(static_cast<uint64_t>(expo(rng)));
    expect_close(ex, "exponential");

    std::lognormal_distribution<double> logn(std::log(50000.0), 1.5);  // long tail
    std::vector<uint64_t> ln;
    for (int i = 0; i < 200000; i++) ln.push_back(static_cast<uint64_t>(logn(rng)));
    expect_close(ln, "lognormal");

    // Bimodal: fast local replies and slow remote ones.
    std::vector<uint64_t> bi;
    std::normal_distribution<double> fast(8000, 500), slow(150000, 20000);
    for (int i = 0; i < 100000; i++) {
        double v = (i % 10 == 0) ? slow(rng) : fast(rng);
        bi.push_back(static_cast<uint64_t>(std::max(v, 0.0)));
    }
    expect_close(bi, "bimodal");
}

TEST(Histogram, ConcurrentRecordingSumsCorrectly) {
    auto h = fresh();
    constexpr int kThreads = 4, kPer = 250000;
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; t++) {
        ts.emplace_back([&h, t] {
            for (int i = 0; i < kPer; i++) h->record(static_cast<uint64_t>(i % 5000) + t);
        });
    }
    for (auto& t : ts) t.join();
    uint64_t want_sum = 0, in_buckets = 0;
    for (int t = 0; t < kThreads; t++) {
        for (int i = 0; i < kPer; i++) want_sum += static_cast<uint64_t>(i % 5000) + t;
    }
    for (int b = 0; b < H::kBuckets; b++) in_buckets += h->buckets[b];
    EXPECT_EQ(h->total(), uint64_t{kThreads} * kPer);
    EXPECT_EQ(in_buckets, uint64_t{kThreads} * kPer);
    EXPECT_EQ(h->sum_ns, want_sum);
    EXPECT_EQ(h->max_ns, 4999u + kThreads - 1);
    // Each linear bucket got an exact share: value 0 only from thread 0.
    EXPECT_EQ(h->buckets[0], static_cast<uint64_t>(kPer / 5000));

    h->reset();
    EXPECT_EQ(h->total(), 0u);
    EXPECT_EQ(h->percentile(0.99), 0u);
}
