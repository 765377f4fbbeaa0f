// At most one log line per kind and window: a flood of refused connections
// must not flood the server log (every event is still counted elsewhere).
#pragma once

#include <cstdint>
#include <unordered_map>

namespace pgrac::ic {

class LogThrottle {
  public:
    explicit LogThrottle(int64_t window_us = 10'000'000) : window_us_(window_us) {}

    // True when a line of `kind` may be logged at now_us; then *suppressed
    // gets how many lines of that kind were held back since the last one.
    bool allow(int kind, int64_t now_us, uint64_t* suppressed) {
        Entry& e = entries_[kind];
        if (e.logged && now_us - e.last_us < window_us_) {
            ++e.suppressed;
            return false;
        }
        *suppressed = e.suppressed;
        e = Entry{true, now_us, 0};
        return true;
    }

  private:
    struct Entry {
        bool logged = false;
        int64_t last_us = 0;
        uint64_t suppressed = 0;
    };
    int64_t window_us_;
    std::unordered_map<int, Entry> entries_;
};

}  // namespace pgrac::ic
