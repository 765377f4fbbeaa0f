// Loopback test on a real device: two RC queue pairs on the same port,
// connected to each other, ping-pong for latency and a windowed stream for
// bandwidth (what ibv_rc_pingpong does, in one process).
#pragma once

#include <cstddef>
#include <string>

namespace pgrac::ctl {

struct LoopbackOptions {
    std::string device;
    int port = 1;
    int gid_index = -1;  // RoCE: the GID to address with; -1 = InfiniBand (LID)
    int lat_iters = 1000;
    size_t lat_size = 64;
    int bw_iters = 256;
    size_t bw_size = 65536;
    int window = 16;         // receives posted / sends in flight
    int timeout_ms = 60000;  // whole test; soft-RoCE under emulation is slow
};

struct LoopbackResult {
    bool ok = false;
    std::string error;
    int path_mtu = 0;            // bytes
    double lat_us_per_iter = 0;  // one round trip (send + reply)
    double bw_mb_per_s = 0;      // 10^6 bytes per second, one direction
    double seconds = 0;          // whole test
};

LoopbackResult run_loopback(const LoopbackOptions& opts);

}  // namespace pgrac::ctl
