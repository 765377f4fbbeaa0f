// The TCP tier under hostile or exhausted conditions: accept() out of
// descriptors (EMFILE), per-connection payload limits, and a frame cut off by
// the end of the stream. Every wait is bounded.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ic/wire/frame.hpp"
#include "tiers/transports.hpp"
#include "tiers/transport_test_support.hpp"

using namespace pgrac;
using namespace pgrac::tiers;
using namespace pgrac::tiers::transporttest;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kWait = std::chrono::seconds(20);

// A Message frame whose payload is payload_len bytes (the message header first).
std::vector<uint8_t> message(uint32_t seq, size_t payload_len) {
    std::vector<uint8_t> payload(std::max(payload_len, ic::kMessageHeaderSize));
    ic::MessageHeader m;
    m.msg_type = 300;
    ic::encode_message_header(m, payload.data());
    for (size_t i = ic::kMessageHeaderSize; i < payload.size(); ++i)
        payload[i] = static_cast<uint8_t>(seq + i);
    ic::FrameHeader h;
    h.type = ic::FrameType::Message;
    h.seq = seq;
    return make_frame(h, payload);
}

// A Recorder that also records accept pauses.
class PauseRecorder : public Recorder {
  public:
    std::vector<std::pair<int, int>> pauses;  // (err, pause_ms)
    void on_accept_paused(int err, int pause_ms) override { pauses.emplace_back(err, pause_ms); }
};

bool pump(std::initializer_list<Transport*> ts, const std::function<bool()>& done) {
    return pump_until(ts, done, kWait, 50);
}

std::unique_ptr<Transport> listening_tcp(Recorder& r, const TcpOptions& opts, uint16_t* port) {
    auto t = make_tcp_transport(r, opts);
    EXPECT_NE(t, nullptr);
    if (t == nullptr) return t;
    *port = free_port();
    std::string error;
    EXPECT_TRUE(t->listen("127.0.0.1", *port, &error)) << error;
    return t;
}

TcpOptions with_initial_limit(uint32_t initial_max_payload) {
    TcpOptions opts;
    opts.initial_max_payload = initial_max_payload;
    return opts;
}

bool write_all(int fd, const std::vector<uint8_t>& bytes, size_t n) {
    return write(fd, bytes.data(), n) == static_cast<ssize_t>(n);
}

// The highest descriptor open in this process.
int highest_open_fd() {
    int highest = -1;
    DIR* d = opendir("/proc/self/fd");
    if (d == nullptr) return -1;
    while (const dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        highest = std::max(highest, std::atoi(e->d_name));
    }
    closedir(d);
    return highest;
}

// Lowers RLIMIT_NOFILE's soft limit for its lifetime.
class FdLimit {
  public:
    explicit FdLimit(rlim_t soft) {
        ok_ = getrlimit(RLIMIT_NOFILE, &saved_) == 0;
        rlimit lowered = saved_;
        lowered.rlim_cur = soft;
        ok_ = ok_ && setrlimit(RLIMIT_NOFILE, &lowered) == 0;
    }
    ~FdLimit() { restore(); }
    FdLimit(const FdLimit&) = delete;
    FdLimit& operator=(const FdLimit&) = delete;
    bool ok() const { return ok_; }
    void restore() {
        if (ok_) setrlimit(RLIMIT_NOFILE, &saved_);
        ok_ = false;
    }

  private:
    rlimit saved_{};
    bool ok_ = false;
};

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct ClientFds {
    std::vector<int> fds;
    ~ClientFds() { close_all(); }
    void close_all() {
        for (int fd : fds) close(fd);
        fds.clear();
    }
};

}  // namespace

// Out of descriptors, the listener stops polling its socket for a while
// instead of spinning on a readable listener; the handler hears of it once;
// dialing fails cleanly; and accepting resumes once descriptors are back.
TEST(TcpAcceptLimits, EmfilePausesAcceptingWithoutSpinning) {
    PauseRecorder r;
    uint16_t port = 0;
    auto t = listening_tcp(r, TcpOptions{}, &port);
    ASSERT_NE(t, nullptr);

    // The clients complete their TCP handshakes in the backlog before the
    // limit leaves room for only a few accepted sockets.
    constexpr int kClients = 64, kRoom = 8;
    ClientFds clients;
    for (int i = 0; i < kClients; ++i) {
        const int fd = raw_connect(port);
        ASSERT_GE(fd, 0) << "client " << i;
        clients.fds.push_back(fd);
    }
    // The limit sits just above the highest descriptor; the holes below it
    // are filled, then kRoom descriptors are given back.
    const int highest = highest_open_fd();
    ASSERT_GT(highest, 0);
    FdLimit limit(static_cast<rlim_t>(highest + 1 + kRoom));
    ASSERT_TRUE(limit.ok());
    ClientFds fillers;
    for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers.fds.push_back(fd);
    ASSERT_EQ(errno, EMFILE);
    ASSERT_GE(fillers.fds.size(), size_t{kRoom});
    for (int i = 0; i < kRoom; ++i) {
        close(fillers.fds.back());
        fillers.fds.pop_back();
    }

    ASSERT_TRUE(pump({t.get()}, [&] { return !r.pauses.empty(); }))
        << r.accepted.size() << " accepted, highest fd " << highest;
    EXPECT_EQ(r.accepted.size(), size_t{kRoom});
    EXPECT_EQ(r.pauses[0].first, EMFILE);
    EXPECT_EQ(r.pauses[0].second, 50);
    EXPECT_GE(t->counters().accept_pauses, 1u);

    // Dialing out needs a descriptor too: a plain connect failure, at once.
    std::string error;
    EXPECT_EQ(t->connect("127.0.0.1", port, &error), 0u);
    EXPECT_NE(error.find("Too many open files"), std::string::npos) << error;

    // 500 ms as an owner runs it: a few timer wakeups, not a busy loop.
    const double cpu_before = cpu_seconds();
    const auto until = Clock::now() + std::chrono::milliseconds(500);
    int wakeups = 0;
    while (Clock::now() < until) {
        pollfd p{t->wait_fd(), POLLIN, 0};
        if (::poll(&p, 1, 20) == 1) ++wakeups;
        t->poll(0);
    }
    const double cpu = cpu_seconds() - cpu_before;
    EXPECT_LT(cpu, 0.1) << "CPU seconds over 500 ms";
    EXPECT_LT(wakeups, 20);
    EXPECT_EQ(r.pauses.size(), 1u);  // once per episode
    const uint64_t pauses = t->counters().accept_pauses;
    EXPECT_GE(pauses, 3u);  // 50, 100, 200 ms... while it goes on
    EXPECT_LE(pauses, 6u);

    // Descriptors come back as the clients leave: the backlog drains (those
    // connections are accepted, then seen closed) and a new client is served.
    clients.close_all();
    fillers.close_all();
    ASSERT_TRUE(pump({t.get()},
                     [&] {
                         return r.accepted.size() == size_t{kClients} &&
                                r.closed.size() == size_t{kClients};
                     }))
        << r.accepted.size() << " accepted, " << r.closed.size() << " closed";
    const int fresh = raw_connect(port);
    ASSERT_GE(fresh, 0);
    const auto frame = message(1, 100);
    ASSERT_TRUE(write_all(fresh, frame, frame.size()));
    ASSERT_TRUE(pump({t.get()}, [&] { return r.frames.size() == 1; }));
    EXPECT_EQ(r.frames[0].conn, r.accepted.back().first);
    EXPECT_EQ(r.pauses.size(), 1u);
    close(fresh);
    limit.restore();
}

// A frame above the connection's limit closes it before its payload is read;
// set_max_payload() raises the limit of that connection only.
TEST(TcpAcceptLimits, InitialLimitUntilRaised) {
    Recorder r;
    uint16_t port = 0;
    auto t = listening_tcp(r, with_initial_limit(1024), &port);
    ASSERT_NE(t, nullptr);
    const auto big = message(1, 2000);

    const int raised = raw_connect(port);
    ASSERT_GE(raised, 0);
    ASSERT_TRUE(pump({t.get()}, [&] { return r.accepted.size() == 1; }));
    t->set_max_payload(r.accepted[0].first, 4096);
    ASSERT_TRUE(write_all(raised, big, big.size()));
    ASSERT_TRUE(pump({t.get()}, [&] { return r.frames.size() == 1; }));
    EXPECT_TRUE(payload_matches(r.frames[0], big));

    const int fresh = raw_connect(port);  // starts at 1024 again
    ASSERT_GE(fresh, 0);
    ASSERT_TRUE(write_all(fresh, big, ic::kFrameHeaderSize));  // the header is enough
    ASSERT_TRUE(pump({t.get()}, [&] { return r.closed.size() == 1; }));
    EXPECT_EQ(r.closed[0].conn, r.accepted[1].first);
    EXPECT_EQ(r.closed[0].frame_error, ic::FrameError::PayloadTooLarge);
    EXPECT_TRUE(r.closed[0].reason.find("payload_too_large") != std::string::npos)
        << r.closed[0].reason;

    // The raised connection carries on; frames at the limit pass on a new one.
    ASSERT_TRUE(write_all(raised, big, big.size()));
    const int small = raw_connect(port);
    ASSERT_GE(small, 0);
    const auto at_limit = message(2, 1024);
    ASSERT_TRUE(write_all(small, at_limit, at_limit.size()));
    ASSERT_TRUE(pump({t.get()}, [&] { return r.frames.size() == 3; }));
    EXPECT_EQ(r.closed.size(), 1u);
    for (int fd : {raised, fresh, small}) close(fd);
}

// The limit never goes above the transport's max_payload, and a dialed
// connection starts at the initial limit as an accepted one does.
TEST(TcpAcceptLimits, LimitIsCappedAndAppliesToDialedConnections) {
    Recorder ra, rb;
    TcpOptions server;
    server.max_payload = 4096;
    uint16_t port = 0;
    auto a = listening_tcp(ra, server, &port);
    auto b = make_tcp_transport(rb, with_initial_limit(512));
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    std::string error;
    const ConnId bconn = b->connect("127.0.0.1", port, &error);
    ASSERT_NE(bconn, 0u) << error;
    ASSERT_TRUE(pump({a.get(), b.get()},
                     [&] { return ra.accepted.size() == 1 && rb.connected.size() == 1; }));
    const ConnId aconn = ra.accepted[0].first;

    a->set_max_payload(aconn, ic::kMaxFramePayload);  // capped at 4096
    b->set_max_payload(aconn + bconn + 100, 1);       // unknown connection: ignored
    ASSERT_TRUE(send_frame(*a, aconn, message(1, 500)));
    ASSERT_TRUE(send_frame(*a, aconn, message(2, 4000)));  // above b's 512
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return !rb.closed.empty(); }));
    ASSERT_EQ(rb.frames.size(), 1u);
    EXPECT_EQ(rb.closed[0].frame_error, ic::FrameError::PayloadTooLarge);

    const int raw = raw_connect(port);
    ASSERT_GE(raw, 0);
    ASSERT_TRUE(pump({a.get()}, [&] { return ra.accepted.size() == 2; }));
    a->set_max_payload(ra.accepted[1].first, ic::kMaxFramePayload);
    const auto too_big = message(3, 5000);
    ASSERT_TRUE(write_all(raw, too_big, ic::kFrameHeaderSize));
    ASSERT_TRUE(pump({a.get()}, [&] {
        for (const ClosedConn& c : ra.closed)
            if (c.conn == ra.accepted[1].first) return true;
        return false;
    }));
    EXPECT_EQ(ra.closed.back().frame_error, ic::FrameError::PayloadTooLarge);
    close(raw);
}

// Many frames through the small reads of a small-limit connection arrive
// whole and in order.
TEST(TcpAcceptLimits, SmallLimitConnectionsReadInSmallChunks) {
    Recorder r;
    uint16_t port = 0;
    auto t = listening_tcp(r, with_initial_limit(256), &port);
    ASSERT_NE(t, nullptr);
    const int raw = raw_connect(port);
    ASSERT_GE(raw, 0);
    std::vector<uint8_t> stream;
    constexpr uint32_t kFrames = 2000;
    for (uint32_t seq = 1; seq <= kFrames; ++seq) {
        const auto f = message(seq, 24 + seq % 200);
        stream.insert(stream.end(), f.begin(), f.end());
    }
    ASSERT_TRUE(write_all(raw, stream, stream.size()));
    ASSERT_TRUE(pump({t.get()}, [&] { return r.frames.size() == kFrames || !r.closed.empty(); }));
    ASSERT_TRUE(r.closed.empty()) << r.closed[0].reason;
    for (uint32_t i = 0; i < kFrames; ++i) {
        ASSERT_EQ(r.frames[i].h.seq, i + 1);
        ASSERT_TRUE(payload_matches(r.frames[i], message(i + 1, 24 + (i + 1) % 200)));
    }
    close(raw);
}

// The peer closes in the middle of a frame: reported as Truncated, so the
// engine counts a malformed frame; a close between frames is not.
TEST(TcpAcceptLimits, EndOfStreamInsideAFrameIsTruncated) {
    Recorder r;
    uint16_t port = 0;
    auto t = listening_tcp(r, TcpOptions{}, &port);
    ASSERT_NE(t, nullptr);
    const auto frame = message(1, 300);
    struct Cut {
        size_t bytes;
        ic::FrameError expected;
    };
    const Cut cuts[] = {
        {10, ic::FrameError::Truncated},                          // inside the header
        {ic::kFrameHeaderSize + 100, ic::FrameError::Truncated},  // inside the payload
        {frame.size(), ic::FrameError::None},                     // after a whole frame
    };
    for (const Cut& cut : cuts) {
        const size_t before = r.closed.size();
        const int raw = raw_connect(port);
        ASSERT_GE(raw, 0);
        ASSERT_TRUE(write_all(raw, frame, cut.bytes));
        close(raw);
        ASSERT_TRUE(pump({t.get()}, [&] { return r.closed.size() > before; }));
        const ClosedConn& c = r.closed.back();
        EXPECT_EQ(c.frame_error, cut.expected) << cut.bytes << " bytes: " << c.reason;
        if (cut.expected == ic::FrameError::Truncated)
            EXPECT_NE(c.reason.find("in the middle of a frame"), std::string::npos) << c.reason;
        else
            EXPECT_EQ(c.reason, "peer closed the connection");
    }
    EXPECT_EQ(r.frames.size(), 1u);
}

// The decoder's limit can change between frames, and it applies to a frame
// whose header is already buffered.
TEST(FrameStreamDecoderLimit, SetMaxPayloadAppliesToTheNextFrame) {
    const auto frame = message(1, 2000);
    ic::FrameHeader h;
    const uint8_t* payload = nullptr;

    ic::FrameStreamDecoder raised(1024);
    raised.feed(frame.data(), ic::kFrameHeaderSize);
    EXPECT_FALSE(raised.next(&h, &payload));
    EXPECT_EQ(raised.error(), ic::FrameError::PayloadTooLarge);

    ic::FrameStreamDecoder later(1024);
    later.set_max_payload(2000);
    later.feed(frame.data(), frame.size());
    ASSERT_TRUE(later.next(&h, &payload));
    EXPECT_EQ(h.payload_len, 2000u);
    later.set_max_payload(1999);
    later.feed(frame.data(), frame.size());
    EXPECT_FALSE(later.next(&h, &payload));
    EXPECT_EQ(later.error(), ic::FrameError::PayloadTooLarge);

    ic::FrameStreamDecoder capped(1024);
    capped.set_max_payload(UINT32_MAX);  // never above kMaxFramePayload
    const auto huge = message(2, ic::kMaxFramePayload + 1);
    capped.feed(huge.data(), ic::kFrameHeaderSize);
    EXPECT_FALSE(capped.next(&h, &payload));
    EXPECT_EQ(capped.error(), ic::FrameError::PayloadTooLarge);
}

TEST(StubTransportLimit, SetMaxPayloadIsANoOp) {
    Recorder r;
    auto t = make_stub_transport(r);
    t->set_max_payload(1, 16);
    EXPECT_EQ(t->max_payload(), ic::kMaxFramePayload);
}
