// Test scaffolding shared by the transport tests (tcp_transport_test.cpp,
// verbs_transport_test.cpp) and the engine tests (tests/unit/engine/test_support.hpp): a
// handler that records every callback, frames built and sent as the engine
// does, loopback ports and raw sockets, and pump_until(), which runs
// transports as an owner would until a condition holds or a deadline passes.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "ic/wire/frame.hpp"
#include "ic/transport/transport.hpp"

namespace pgrac::tiers::transporttest {

struct ReceivedFrame {
    ConnId conn;
    ic::FrameHeader h;
    std::vector<uint8_t> payload;
};

struct ClosedConn {
    ConnId conn;
    std::string reason;
    ic::FrameError frame_error;
};

// Records every callback, and counts callbacks made while another was running.
class Recorder : public TransportHandler {
  public:
    std::vector<ConnId> connected;
    std::vector<std::pair<ConnId, std::string>> connect_failed;
    std::vector<std::pair<ConnId, std::string>> accepted;
    std::vector<ReceivedFrame> frames;  // only while keep_frames
    std::vector<ClosedConn> closed;
    std::function<void(ConnId, const ic::FrameHeader&, const uint8_t*)> frame_hook;
    bool keep_frames = true;
    size_t frame_count = 0;
    int reentered = 0;

    void on_connected(ConnId conn, bool ok, const std::string& error) override {
        Enter e(this);
        if (ok)
            connected.push_back(conn);
        else
            connect_failed.emplace_back(conn, error);
    }
    void on_accepted(ConnId conn, const std::string& peer_host) override {
        Enter e(this);
        accepted.emplace_back(conn, peer_host);
    }
    void on_frame(ConnId conn, const ic::FrameHeader& h, const uint8_t* payload) override {
        Enter e(this);
        ++frame_count;
        if (keep_frames)
            frames.push_back({conn, h, std::vector<uint8_t>(payload, payload + h.payload_len)});
        if (frame_hook) frame_hook(conn, h, payload);
    }
    void on_closed(ConnId conn, const std::string& reason, ic::FrameError fe) override {
        Enter e(this);
        closed.push_back({conn, reason, fe});
    }

  private:
    struct Enter {
        explicit Enter(Recorder* r) : r_(r) {
            if (r_->inside_) ++r_->reentered;
            r_->inside_ = true;
        }
        ~Enter() { r_->inside_ = false; }
        Recorder* r_;
    };
    bool inside_ = false;
};

// A port nobody listens on right now on host, a numeric IPv4 or IPv6 address
// (bind port 0, read it back, close); 0 if none could be had.
inline uint16_t free_port(const std::string& host = "127.0.0.1") {
    sockaddr_storage ss{};
    auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    const bool v6 = inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) == 1;
    socklen_t len;
    if (v6) {
        a6->sin6_family = AF_INET6;
        len = sizeof *a6;
    } else {
        a4->sin_family = AF_INET;
        inet_pton(AF_INET, host.c_str(), &a4->sin_addr);
        len = sizeof *a4;
    }
    const int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    uint16_t port = 0;
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
        port = ntohs(v6 ? a6->sin6_port : a4->sin_port);
    if (fd >= 0) close(fd);
    return port;
}

// A raw blocking client socket connected to 127.0.0.1:port, or -1.
inline int raw_connect(uint16_t port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// The wire form of a frame: h (with payload_len set) and its payload.
inline std::vector<uint8_t> make_frame(ic::FrameHeader h, const std::vector<uint8_t>& payload) {
    h.payload_len = static_cast<uint32_t>(payload.size());
    std::vector<uint8_t> out(ic::kFrameHeaderSize);
    ic::encode_frame_header(h, payload.data(), out.data());
    out.insert(out.end(), payload.begin(), payload.end());
    return out;
}

// Sends a frame as the engine does: header and payload as separate pieces.
inline bool send_frame(Transport& t, ConnId conn, const std::vector<uint8_t>& frame) {
    iovec iov[2] = {
        {const_cast<uint8_t*>(frame.data()), ic::kFrameHeaderSize},
        {const_cast<uint8_t*>(frame.data()) + ic::kFrameHeaderSize,
         frame.size() - ic::kFrameHeaderSize},
    };
    return t.send(conn, iov, frame.size() > ic::kFrameHeaderSize ? 2 : 1);
}

inline bool payload_matches(const ReceivedFrame& f, const std::vector<uint8_t>& frame) {
    return f.payload.size() == frame.size() - ic::kFrameHeaderSize &&
           std::memcmp(f.payload.data(), frame.data() + ic::kFrameHeaderSize, f.payload.size()) ==
               0;
}

// Runs the transports as an owner would (sleeping up to sleep_ms on their
// wait fds, then polling each) until done() holds; false after limit.
inline bool pump_until(std::initializer_list<Transport*> ts, const std::function<bool()>& done,
                       std::chrono::milliseconds limit, int sleep_ms) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::vector<pollfd> fds;
        for (Transport* t : ts) fds.push_back({t->wait_fd(), POLLIN, 0});
        ::poll(fds.data(), fds.size(), sleep_ms);
        for (Transport* t : ts) t->poll(0);
    }
    return true;
}

}  // namespace pgrac::tiers::transporttest
