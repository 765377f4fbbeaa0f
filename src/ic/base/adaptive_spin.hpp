// How long to busy-poll before sleeping, learned from the waits themselves.
//
// A sleep and a wakeup cost 5-25 us; polling wins when the awaited event comes
// sooner than that, and loses badly when the CPUs are oversubscribed (the
// poller then steals the CPU from the very process it waits for). So the
// budget is the configured maximum while most recent waits ended within it,
// and zero once they mostly did not: under overload the processes stop
// polling by themselves, and start again when waits become short.
#pragma once

#include <cstdint>

namespace pgrac::ic {

class AdaptiveSpin {
  public:
    explicit AdaptiveSpin(uint64_t max_ns = 0) : max_ns_(max_ns) {}

    void set_max_ns(uint64_t max_ns) { max_ns_ = max_ns; }
    uint64_t max_ns() const { return max_ns_; }
    // Nanoseconds to poll before the next sleep (0 = sleep at once).
    uint64_t budget_ns() const { return score_ >= kOn ? max_ns_ : 0; }
    // A wait ended after wait_ns (polling included).
    void observe(uint64_t wait_ns) {
        if (max_ns_ > 0 && wait_ns <= max_ns_) {
            if (score_ < kMax) score_++;
        } else {
            score_ = score_ > kMiss ? score_ - kMiss : 0;
        }
    }

  private:
    // Polling continues while at least two waits in three were short.
    static constexpr uint32_t kMax = 16, kOn = 8, kMiss = 2;
    uint64_t max_ns_;
    uint32_t score_ = kMax;
};

}  // namespace pgrac::ic
