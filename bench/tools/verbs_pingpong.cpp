// Ping-pong latency through the verbs transport, to set beside ibv_rc_pingpong
// in the same soft-RoCE VM run. A forked child listens and echoes every frame;
// the parent dials, sends one frame at a time and waits for its echo.
//
//   verbs_pingpong --addr IP [--port P] [--sizes 64,8192] [--iters N] [--warmup N]
//                  [--device rxe0] [--events]
//
// Sizes are frame payload bytes (the 24-byte frame header comes on top, as
// ibv_rc_pingpong's -s is its whole message). By default both sides busy-poll
// (poll(0) in a loop), as ibv_rc_pingpong does without -e; --events sleeps on
// wait_fd() instead. Prints one line per size: p50, p99, mean and min in us.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ic/wire/frame.hpp"
#include "latency_stats.hpp"
#include "tiers/verbs/transport.hpp"

using namespace pgrac;
using namespace pgrac::tiers;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
    std::string addr = "127.0.0.1", device;
    uint16_t port = 18600;
    std::vector<size_t> sizes{64, 8192};
    int iters = 1000, warmup = 50;
    bool events = false;
};

class Handler : public TransportHandler {
  public:
    Transport* t = nullptr;
    bool echo = false;
    ConnId conn = 0;
    bool connected = false, closed = false, failed = false;
    std::string error;
    size_t frames = 0;
    std::vector<uint8_t> out;

    void on_connected(ConnId c, bool ok, const std::string& e) override {
        conn = c;
        connected = ok;
        failed = !ok;
        error = e;
    }
    void on_accepted(ConnId c, const std::string&) override {
        conn = c;
        connected = true;
    }
    void on_frame(ConnId c, const ic::FrameHeader& h, const uint8_t* payload) override {
        ++frames;
        if (!echo) return;
        ic::FrameHeader r = h;
        uint8_t hdr[ic::kFrameHeaderSize];
        ic::encode_frame_header(r, payload, hdr);
        iovec iov[2] = {{hdr, sizeof hdr}, {const_cast<uint8_t*>(payload), h.payload_len}};
        t->send(c, iov, h.payload_len > 0 ? 2 : 1);
    }
    void on_closed(ConnId, const std::string& reason, ic::FrameError) override {
        closed = true;
        error = reason;
    }
};

void run_once(Transport& t, bool events) {
    if (events) {
        pollfd p{t.wait_fd(), POLLIN, 0};
        ::poll(&p, 1, 100);
    }
    t.poll(0);
}

Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", k.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (k == "--addr") {
            a.addr = next();
        } else if (k == "--port") {
            a.port = static_cast<uint16_t>(std::atoi(next().c_str()));
        } else if (k == "--iters") {
            a.iters = std::max(1, std::atoi(next().c_str()));
        } else if (k == "--warmup") {
            a.warmup = std::max(0, std::atoi(next().c_str()));
        } else if (k == "--device") {
            a.device = next();
        } else if (k == "--events") {
            a.events = true;
        } else if (k == "--sizes") {
            a.sizes.clear();
            std::string s = next();
            for (size_t at = 0; at <= s.size();) {
                size_t comma = s.find(',', at);
                if (comma == std::string::npos) comma = s.size();
                a.sizes.push_back(std::strtoul(s.substr(at, comma - at).c_str(), nullptr, 10));
                at = comma + 1;
            }
        } else {
            std::fprintf(stderr,
                         "usage: verbs_pingpong --addr IP [--port P] [--sizes 64,8192] "
                         "[--iters N] [--warmup N] [--device NAME] [--events]\n");
            std::exit(2);
        }
    }
    return a;
}

VerbsOptions options(const Args& a) {
    VerbsOptions o;
    o.device = a.device;
    size_t biggest = 64;
    for (size_t s : a.sizes) biggest = std::max(biggest, s);
    o.max_payload = static_cast<uint32_t>(std::min<size_t>(biggest, ic::kMaxFramePayload));
    o.send_slots = 64;
    o.recv_slots = 128;
    o.qp_send_depth = 32;
    o.connect_timeout_ms = 20000;
    return o;
}

int server(const Args& a, int ready_fd) {
    Handler h;
    h.echo = true;
    std::string error;
    auto t = make_verbs_transport(h, options(a), &error);
    if (!t || !t->listen(a.addr, a.port, &error)) {
        std::fprintf(stderr, "server: %s\n", error.c_str());
        return 1;
    }
    h.t = t.get();
    if (write(ready_fd, "r", 1) != 1) return 1;
    ::close(ready_fd);
    while (!h.closed) run_once(*t, a.events);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Args a = parse(argc, argv);
    int pipefd[2];
    if (pipe(pipefd) != 0) return 1;
    const pid_t child = fork();
    if (child == 0) {
        ::close(pipefd[0]);
        _exit(server(a, pipefd[1]));
    }
    ::close(pipefd[1]);
    char c;
    if (read(pipefd[0], &c, 1) != 1) {
        std::fprintf(stderr, "verbs_pingpong: the server did not start\n");
        waitpid(child, nullptr, 0);
        return 1;
    }

    Handler h;
    std::string error;
    auto t = make_verbs_transport(h, options(a), &error);
    if (!t) {
        std::fprintf(stderr, "verbs_pingpong: %s\n", error.c_str());
        kill(child, SIGTERM);
        return 1;
    }
    h.t = t.get();
    if (t->connect(a.addr, a.port, &error) == 0) {
        std::fprintf(stderr, "verbs_pingpong: %s\n", error.c_str());
        kill(child, SIGTERM);
        return 1;
    }
    while (!h.connected && !h.failed) run_once(*t, true);
    if (h.failed) {
        std::fprintf(stderr, "verbs_pingpong: %s\n", h.error.c_str());
        kill(child, SIGTERM);
        return 1;
    }
    VerbsStatus st;
    verbs_transport_status(*t, &st);
    std::printf("verbs_pingpong: %s %s (%s), gid %d %s, mtu %d, inline <= %u B, %s polling\n",
                st.device.c_str(), st.tier.c_str(), st.link_layer.c_str(), st.gid_index,
                st.gid_type.c_str(), st.active_mtu, st.max_inline,
                a.events ? "event-driven" : "busy");
    int rc = 0;
    for (size_t size : a.sizes) {
        std::vector<uint8_t> payload(size, 0x5a);
        ic::FrameHeader fh;
        fh.type = ic::FrameType::Message;
        fh.payload_len = static_cast<uint32_t>(size);
        uint8_t hdr[ic::kFrameHeaderSize];
        ic::encode_frame_header(fh, payload.data(), hdr);
        iovec iov[2] = {{hdr, sizeof hdr}, {payload.data(), size}};
        std::vector<uint64_t> ns;
        ns.reserve(static_cast<size_t>(a.iters));
        for (int i = 0; i < a.warmup + a.iters && !h.closed; ++i) {
            const size_t want = h.frames + 1;
            const uint64_t t0 = pgrac::bench::now_ns();
            if (!t->send(h.conn, iov, size > 0 ? 2 : 1)) {
                std::fprintf(stderr, "verbs_pingpong: send failed\n");
                rc = 1;
                break;
            }
            while (h.frames < want && !h.closed) run_once(*t, a.events);
            if (i >= a.warmup) ns.push_back(pgrac::bench::now_ns() - t0);
        }
        if (h.closed) {
            std::fprintf(stderr, "verbs_pingpong: connection closed: %s\n", h.error.c_str());
            rc = 1;
            break;
        }
        // The same statistics as tcp_pingpong and libpq_latency print.
        const pgrac::bench::LatencySummary st = pgrac::bench::summarize_latency(ns);
        std::printf(
            "size %6zu B  iters %5zu  p50 %8.1f us  p99 %8.1f us  mean %8.1f us  "
            "min %8.1f us\n",
            size, ns.size(), st.p50_us, st.p99_us, st.mean_us, ns.front() / 1000.0);
    }
    t->close(h.conn);
    for (int i = 0; i < 20; ++i) run_once(*t, false);
    t.reset();
    int status = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (waitpid(child, &status, WNOHANG) == 0) {
        if (Clock::now() > deadline) {
            kill(child, SIGKILL);
            waitpid(child, &status, 0);
            break;
        }
        usleep(10000);
    }
    return rc;
}
