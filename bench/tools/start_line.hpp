// Requester threads that warm up on their own, start timing together and stop
// at one deadline (tcp_pingpong and libpq_latency, --connections C --seconds S).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "latency_stats.hpp"

namespace pgrac::bench {

class StartLine {
  public:
    explicit StartLine(int threads) : threads_(threads) {}

    // In each requester, once warmed up: waits for the start; the deadline (ns).
    uint64_t arrive() {
        std::unique_lock<std::mutex> lock(mu_);
        ready_++;
        cv_.notify_all();
        cv_.wait(lock, [&] { return go_; });
        return deadline_;
    }

    // In the main thread: waits until every requester arrived, starts them to
    // run for `seconds`; the start time (ns).
    uint64_t release(double seconds) {
        uint64_t start = 0;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [&] { return ready_ == threads_; });
            start = now_ns();
            deadline_ = start + static_cast<uint64_t>(seconds * 1e9);
            go_ = true;
        }
        cv_.notify_all();
        return start;
    }

  private:
    const int threads_;
    std::mutex mu_;
    std::condition_variable cv_;
    int ready_ = 0;
    bool go_ = false;
    uint64_t deadline_ = 0;
};

}  // namespace pgrac::bench
