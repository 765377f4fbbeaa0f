// Log-linear latency histogram. Values below 2*kSub ns get one bucket each;
// above that, a value with highest set bit e goes to the kSub sub-buckets of
// exponent e, chosen by the kSubBits bits below the highest bit. Each
// sub-bucket is 1/kSub of its lower bound wide, hence the 6.25 % bound.
#include "ic/base/latency_histogram.hpp"

#include <cstring>

#include "ic/base/atomics.hpp"

namespace pgrac::ic {

namespace {

constexpr int kLinear = 2 * LatencyHistogram::kSub;  // values 0 .. kLinear-1 map 1:1
constexpr int kLast = LatencyHistogram::kBuckets - 1;

}  // namespace

int LatencyHistogram::bucket_of(uint64_t ns) {
    if (ns < static_cast<uint64_t>(kLinear)) return static_cast<int>(ns);
    const int e = 63 - __builtin_clzll(ns);  // >= kSubBits + 1
    if (e >= kMaxExp) return kLast;
    const int mantissa = static_cast<int>((ns >> (e - kSubBits)) & (kSub - 1));
    // Exponent kSubBits+1 starts right after the linear range.
    return (e - kSubBits + 1) * kSub + mantissa;
}

uint64_t LatencyHistogram::bucket_upper(int bucket) {
    if (bucket < kLinear) return bucket < 0 ? 0 : static_cast<uint64_t>(bucket);
    if (bucket > kLast) bucket = kLast;
    const int e = bucket / kSub + kSubBits - 1;
    const uint64_t mantissa = static_cast<uint64_t>(bucket % kSub);
    const int shift = e - kSubBits;
    // Nominal upper bound; the last bucket also holds clamped larger values
    // (percentile() reports max_ns for those).
    return ((kSub + mantissa + 1) << shift) - 1;
}

void LatencyHistogram::reset() {
    std::memset(static_cast<void*>(this), 0, sizeof(*this));
}

void LatencyHistogram::record(uint64_t ns) {
    // Relaxed: each field is a statistic on its own; readers tolerate seeing
    // a record in one field before another.
    // Qualified: the member `count` hides the atomics helper of that name.
    ic::count(&buckets[bucket_of(ns)]);
    ic::count(&count);
    ic::count(&sum_ns, ns);
    uint64_t cur = load_relaxed(&max_ns);
    while (ns > cur && !__atomic_compare_exchange_n(&max_ns, &cur, ns, true, __ATOMIC_RELAXED,
                                                    __ATOMIC_RELAXED)) {
        // cur was reloaded by the failed CAS
    }
}

uint64_t LatencyHistogram::percentile(double q) const {
    // Walk a snapshot so that the total and the walk agree even while other
    // processes keep recording.
    uint64_t snap[kBuckets];
    uint64_t total = 0;
    for (int i = 0; i < kBuckets; i++) {
        snap[i] = load_relaxed(&buckets[i]);
        total += snap[i];
    }
    if (total == 0) return 0;
    if (!(q > 0.0)) q = 0.0;  // also catches NaN
    if (q > 1.0) q = 1.0;
    // Nearest rank: the smallest value with at least q * total values <= it.
    double r = q * static_cast<double>(total);
    uint64_t rank = static_cast<uint64_t>(r);
    if (static_cast<double>(rank) < r) rank++;
    if (rank == 0) rank = 1;
    if (rank > total) rank = total;

    uint64_t seen = 0;
    int b = 0;
    for (; b < kBuckets; b++) {
        seen += snap[b];
        if (seen >= rank) break;
    }
    if (b > kLast) b = kLast;
    // No recorded value exceeds max_ns, so when max_ns falls in this bucket it
    // is a tighter bound than the bucket's top (and the only true bound for the
    // last bucket, which holds clamped values). max_ns may lag the buckets
    // while records are in flight; then it is below this bucket and ignored.
    const uint64_t upper = bucket_upper(b);
    const uint64_t lower = b == 0 ? 0 : bucket_upper(b - 1) + 1;
    const uint64_t max = load_relaxed(&max_ns);
    if (max < lower) return upper;
    return (b == kLast || max < upper) ? max : upper;
}

uint64_t LatencyHistogram::total() const {
    return load_relaxed(&count);
}

}  // namespace pgrac::ic
