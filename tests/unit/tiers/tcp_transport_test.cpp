// The TCP tier over real sockets on the loopback interface: two transports in
// one process, plus raw sockets playing misbehaving peers. Every wait is
// bounded (pump() gives up after kWait).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
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

// A Message frame with seq, whose body is body_len bytes of a pattern from seq.
std::vector<uint8_t> message(uint32_t seq, size_t body_len, uint16_t flags = 0) {
    ic::MessageHeader m;
    m.msg_type = 300;
    m.rpc_id = seq;
    std::vector<uint8_t> payload(ic::kMessageHeaderSize + body_len);
    ic::encode_message_header(m, payload.data());
    for (size_t i = 0; i < body_len; ++i)
        payload[ic::kMessageHeaderSize + i] = static_cast<uint8_t>(seq * 31 + i);
    ic::FrameHeader h;
    h.type = ic::FrameType::Message;
    h.seq = seq;
    h.flags = flags;
    h.src_node = 7;
    return make_frame(h, payload);
}

bool readable(int fd, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1;
}

// Runs the transports as an owner would (sleeping on their wait fds) until
// done() holds; false after kWait.
bool pump(std::initializer_list<Transport*> ts, const std::function<bool()>& done) {
    return pump_until(ts, done, kWait, 50);
}

std::unique_ptr<Transport> tcp(Recorder& r, TcpOptions opts = {}) {
    auto t = make_tcp_transport(r, opts);
    EXPECT_NE(t, nullptr);
    return t;
}

// A (server) listens on 127.0.0.1; B (client) connects to it.
class TcpPair : public ::testing::Test {
  protected:
    void connect_pair(TcpOptions opts = {}) {
        a = tcp(ra, opts);
        b = tcp(rb, opts);
        port = free_port();
        std::string error;
        ASSERT_TRUE(a->listen("127.0.0.1", port, &error)) << error;
        bconn = b->connect("127.0.0.1", port, &error);
        ASSERT_NE(bconn, 0u) << error;
        ASSERT_TRUE(pump({a.get(), b.get()},
                         [&] { return rb.connected.size() == 1 && ra.accepted.size() == 1; }));
        aconn = ra.accepted[0].first;
    }
    void SetUp() override { connect_pair(); }
    void TearDown() override {
        EXPECT_EQ(ra.reentered, 0);
        EXPECT_EQ(rb.reentered, 0);
    }

    Recorder ra, rb;
    std::unique_ptr<Transport> a, b;
    uint16_t port = 0;
    ConnId aconn = 0, bconn = 0;
};

}  // namespace

TEST_F(TcpPair, ConnectsAndAccepts) {
    EXPECT_STREQ(a->name(), "tcp");
    EXPECT_EQ(rb.connected[0], bconn);
    EXPECT_EQ(ra.accepted[0].second, "127.0.0.1");
    EXPECT_EQ(a->max_payload(), ic::kMaxFramePayload);
    EXPECT_TRUE(rb.connect_failed.empty());
    EXPECT_TRUE(ra.closed.empty() && rb.closed.empty());
}

TEST_F(TcpPair, FramesBothWays) {
    const auto request = message(1, 40, ic::kFlagRpcRequest);
    ASSERT_TRUE(send_frame(*b, bconn, request));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == 1; }));
    const ReceivedFrame& f = ra.frames[0];
    EXPECT_EQ(f.conn, aconn);
    EXPECT_EQ(f.h.type, ic::FrameType::Message);
    EXPECT_EQ(f.h.flags, ic::kFlagRpcRequest);
    EXPECT_EQ(f.h.seq, 1u);
    EXPECT_EQ(f.h.src_node, 7);
    EXPECT_TRUE(payload_matches(f, request));

    const auto reply = message(1, 8, ic::kFlagRpcReply);
    ASSERT_TRUE(send_frame(*a, aconn, reply));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return rb.frames.size() == 1; }));
    EXPECT_EQ(rb.frames[0].conn, bconn);
    EXPECT_EQ(rb.frames[0].h.flags, ic::kFlagRpcReply);
    EXPECT_TRUE(payload_matches(rb.frames[0], reply));

    const TransportCounters ca = a->counters(), cb = b->counters();
    EXPECT_EQ(cb.frames_sent, 1u);
    EXPECT_EQ(cb.bytes_sent, request.size());
    EXPECT_EQ(ca.frames_recv, 1u);
    EXPECT_EQ(ca.bytes_recv, request.size());
    EXPECT_EQ(ca.frames_sent, 1u);
    EXPECT_EQ(cb.frames_recv, 1u);
    EXPECT_GE(cb.send_calls, 1u);
}

TEST_F(TcpPair, LargePayloadsBothWays) {
    std::vector<std::vector<uint8_t>> to_a, to_b;
    for (uint32_t i = 1; i <= 5; ++i) {
        to_a.push_back(message(i, 200 * 1024));
        to_b.push_back(message(100 + i, 200 * 1024));
        ASSERT_TRUE(send_frame(*b, bconn, to_a.back()));
        ASSERT_TRUE(send_frame(*a, aconn, to_b.back()));
    }
    ASSERT_TRUE(
        pump({a.get(), b.get()}, [&] { return ra.frames.size() == 5 && rb.frames.size() == 5; }));
    for (size_t i = 0; i < 5; ++i) {
        EXPECT_TRUE(payload_matches(ra.frames[i], to_a[i])) << i;
        EXPECT_TRUE(payload_matches(rb.frames[i], to_b[i])) << i;
    }
    EXPECT_EQ(a->queued_bytes(aconn), 0u);
    EXPECT_EQ(b->queued_bytes(bconn), 0u);
}

TEST_F(TcpPair, TheLargestAllowedPayloadPasses) {
    const auto big = message(1, ic::kMaxFramePayload - ic::kMessageHeaderSize);
    ASSERT_TRUE(send_frame(*b, bconn, big));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == 1; }));
    EXPECT_TRUE(payload_matches(ra.frames[0], big));
}

TEST_F(TcpPair, ManySmallFramesArriveInOrder) {
    constexpr uint32_t kFrames = 20000;
    for (uint32_t seq = 1; seq <= kFrames; ++seq)
        ASSERT_TRUE(send_frame(*b, bconn, message(seq, 40)));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == kFrames; }));
    for (uint32_t i = 0; i < kFrames; ++i) ASSERT_EQ(ra.frames[i].h.seq, i + 1);
    EXPECT_EQ(b->counters().frames_sent, kFrames);
    EXPECT_EQ(a->counters().frames_recv, kFrames);
}

// Frames sent with the hint that more follow (MSG_MORE) share segments: the
// kernel holds a partial one; push_more() sends it, and they arrive in order.
TEST_F(TcpPair, FramesHeldForMoreGoOutOnPushMore) {
    b->set_more(true);
    for (uint32_t seq = 1; seq <= 3; ++seq) ASSERT_TRUE(send_frame(*b, bconn, message(seq, 100)));
    b->set_more(false);
    const auto t0 = Clock::now();
    pump_until(
        {a.get(), b.get()}, [&] { return ra.frames.size() == 3; }, std::chrono::milliseconds(100),
        5);
    const size_t before_push = ra.frames.size();
    b->push_more();
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == 3; }));
    const auto waited = Clock::now() - t0;
    for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(ra.frames[i].h.seq, i + 1);
    EXPECT_EQ(before_push, 0u) << "held for the frames the hint promised";
    EXPECT_LT(waited, std::chrono::milliseconds(150)) << "and sent by push_more at once";
    // A send without the hint sends what an earlier one held, on its own.
    b->set_more(true);
    ASSERT_TRUE(send_frame(*b, bconn, message(4, 100)));
    b->set_more(false);
    ASSERT_TRUE(send_frame(*b, bconn, message(5, 100)));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == 5; }));
    EXPECT_EQ(ra.frames[3].h.seq, 4u);
}

// The receiver does not read while the sender queues far more than the socket
// buffers hold; once it reads, everything arrives, in order, and the queue
// empties in batched writes.
class TcpBacklog : public TcpPair {
  protected:
    void SetUp() override {
        TcpOptions small;
        small.sndbuf = small.rcvbuf = 64 * 1024;
        connect_pair(small);
    }
};

TEST_F(TcpBacklog, LargeFramesDrainWhenThePeerReads) {
    constexpr uint32_t kFrames = 100;
    for (uint32_t seq = 1; seq <= kFrames; ++seq)
        ASSERT_TRUE(send_frame(*a, aconn, message(seq, 200 * 1024)));
    EXPECT_GT(a->queued_bytes(aconn), size_t{10} << 20);
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return rb.frames.size() == kFrames; }));
    for (uint32_t i = 0; i < kFrames; ++i) {
        ASSERT_EQ(rb.frames[i].h.seq, i + 1);
        ASSERT_TRUE(payload_matches(rb.frames[i], message(i + 1, 200 * 1024))) << i;
    }
    EXPECT_EQ(a->queued_bytes(aconn), 0u);
    EXPECT_EQ(a->counters().frames_sent, kFrames);
}

TEST_F(TcpBacklog, SmallFramesAreBatchedIntoFewWrites) {
    constexpr uint32_t kFrames = 50000;
    for (uint32_t seq = 1; seq <= kFrames; ++seq)
        ASSERT_TRUE(send_frame(*a, aconn, message(seq, 40)));
    EXPECT_GT(a->queued_bytes(aconn), 0u);
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return rb.frames.size() == kFrames; }));
    for (uint32_t i = 0; i < kFrames; ++i) ASSERT_EQ(rb.frames[i].h.seq, i + 1);
    EXPECT_EQ(a->queued_bytes(aconn), 0u);
    const TransportCounters c = a->counters();
    EXPECT_EQ(c.frames_sent, kFrames);
    EXPECT_LT(c.send_calls, kFrames / 4);
}

TEST_F(TcpPair, WaitFdSignalsIncomingFrames) {
    a->poll(0);
    EXPECT_FALSE(readable(a->wait_fd(), 0));
    ASSERT_TRUE(send_frame(*b, bconn, message(1, 10)));
    EXPECT_TRUE(readable(a->wait_fd(), 5000));
    a->poll(0);
    EXPECT_EQ(ra.frames.size(), 1u);
}

TEST_F(TcpPair, CloseIsReportedFromALaterPoll) {
    b->close(bconn);
    EXPECT_TRUE(rb.closed.empty());          // not from inside close()
    EXPECT_TRUE(readable(b->wait_fd(), 0));  // but the owner is woken for it
    EXPECT_FALSE(send_frame(*b, bconn, message(1, 1)));
    ASSERT_TRUE(
        pump({a.get(), b.get()}, [&] { return rb.closed.size() == 1 && ra.closed.size() == 1; }));
    EXPECT_EQ(rb.closed[0].conn, bconn);
    EXPECT_EQ(rb.closed[0].reason, "closed locally");
    EXPECT_EQ(ra.closed[0].conn, aconn);
    EXPECT_EQ(ra.closed[0].reason, "peer closed the connection");
    EXPECT_EQ(ra.closed[0].frame_error, ic::FrameError::None);
    b->close(bconn);  // again: nothing more to report
    b->poll(0);
    EXPECT_EQ(rb.closed.size(), 1u);
}

TEST_F(TcpPair, HandlerMaySendAndCloseInsideOnFrame) {
    ra.frame_hook = [&](ConnId conn, const ic::FrameHeader& h, const uint8_t*) {
        EXPECT_TRUE(send_frame(*a, conn, message(h.seq, 16, ic::kFlagRpcReply)));
        if (h.seq == 3) a->close(conn);
    };
    for (uint32_t seq = 1; seq <= 6; ++seq) ASSERT_TRUE(send_frame(*b, bconn, message(seq, 16)));
    ASSERT_TRUE(
        pump({a.get(), b.get()}, [&] { return ra.closed.size() == 1 && rb.closed.size() == 1; }));
    ASSERT_EQ(ra.frames.size(), 3u);  // nothing after the close
    EXPECT_EQ(ra.closed[0].reason, "closed locally");
    ASSERT_EQ(rb.frames.size(), 3u);
    for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(rb.frames[i].h.seq, i + 1);
    EXPECT_EQ(rb.closed[0].reason, "peer closed the connection");
}

TEST_F(TcpPair, SendRefusesWhatIsNotAFrame) {
    uint8_t bytes[10] = {};
    iovec iov{bytes, sizeof bytes};
    EXPECT_FALSE(b->send(bconn, &iov, 1));
    EXPECT_FALSE(b->send(bconn, &iov, 0));
    EXPECT_FALSE(send_frame(*b, bconn + 1000, message(1, 1)));
    const auto too_big = message(1, ic::kMaxFramePayload);
    EXPECT_FALSE(send_frame(*b, bconn, too_big));
    ASSERT_TRUE(send_frame(*b, bconn, message(1, 1)));  // still usable
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == 1; }));
}

TEST_F(TcpPair, GarbageClosesThatConnectionOnly) {
    const int raw = raw_connect(port);
    ASSERT_GE(raw, 0);
    const char garbage[] = "GET / HTTP/1.1\r\nHost: pgrac\r\n\r\n";
    ASSERT_EQ(write(raw, garbage, sizeof garbage - 1), ssize_t(sizeof garbage - 1));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.closed.size() == 1; }));
    EXPECT_EQ(ra.closed[0].frame_error, ic::FrameError::BadMagic);
    EXPECT_NE(ra.closed[0].reason.find("bad_magic"), std::string::npos) << ra.closed[0].reason;
    char c;
    EXPECT_TRUE(readable(raw, 5000));
    EXPECT_LE(read(raw, &c, 1), 0);  // dropped by the transport
    close(raw);

    // The listener and the other connection carry on.
    ASSERT_TRUE(send_frame(*b, bconn, message(1, 8)));
    Recorder rc;
    auto c2 = tcp(rc);
    std::string error;
    const ConnId cconn = c2->connect("127.0.0.1", port, &error);
    ASSERT_NE(cconn, 0u) << error;
    ASSERT_TRUE(pump({a.get(), b.get(), c2.get()}, [&] {
        return rc.connected.size() == 1 && ra.accepted.size() == 3 && ra.frames.size() == 1;
    }));
    ASSERT_TRUE(send_frame(*c2, cconn, message(2, 8)));
    ASSERT_TRUE(pump({a.get(), c2.get()}, [&] { return ra.frames.size() == 2; }));
    EXPECT_EQ(ra.frames[1].conn, ra.accepted[2].first);
}

TEST_F(TcpPair, OversizedLengthIsRefusedBeforeItsPayload) {
    const int raw = raw_connect(port);
    ASSERT_GE(raw, 0);
    auto header = message(1, 0);
    const uint32_t len = ic::kMaxFramePayload + 1;
    for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<uint8_t>(len >> (8 * i));
    ASSERT_EQ(write(raw, header.data(), ic::kFrameHeaderSize), ssize_t(ic::kFrameHeaderSize));
    ASSERT_TRUE(pump({a.get()}, [&] { return ra.closed.size() == 1; }));
    EXPECT_EQ(ra.closed[0].frame_error, ic::FrameError::PayloadTooLarge);
    close(raw);
}

TEST_F(TcpPair, CorruptedFrameClosesWithBadChecksum) {
    const int raw = raw_connect(port);
    ASSERT_GE(raw, 0);
    auto frame = message(1, 100);
    frame[ic::kFrameHeaderSize + 50] ^= 0x10;
    ASSERT_EQ(write(raw, frame.data(), frame.size()), ssize_t(frame.size()));
    ASSERT_TRUE(pump({a.get()}, [&] { return ra.closed.size() == 1; }));
    EXPECT_EQ(ra.closed[0].frame_error, ic::FrameError::BadChecksum);
    EXPECT_EQ(ra.frames.size(), 0u);
    close(raw);
}

TEST_F(TcpPair, ResetByPeerIsReported) {
    const int raw = raw_connect(port);
    ASSERT_GE(raw, 0);
    ASSERT_TRUE(pump({a.get()}, [&] { return ra.accepted.size() == 2; }));
    const linger abort_on_close{1, 0};
    ASSERT_EQ(setsockopt(raw, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close), 0);
    close(raw);  // sends RST
    ASSERT_TRUE(pump({a.get()}, [&] { return ra.closed.size() == 1; }));
    EXPECT_EQ(ra.closed[0].conn, ra.accepted[1].first);
    EXPECT_NE(ra.closed[0].reason.find("reset"), std::string::npos) << ra.closed[0].reason;
    EXPECT_EQ(ra.closed[0].frame_error, ic::FrameError::None);
}

TEST(TcpTransport, FramesSentWhileConnectingGoOutInOrder) {
    Recorder ra, rb;
    auto a = tcp(ra), b = tcp(rb);
    const uint16_t port = free_port();
    std::string error;
    ASSERT_TRUE(a->listen("127.0.0.1", port, &error)) << error;
    const ConnId conn = b->connect("127.0.0.1", port, &error);
    ASSERT_NE(conn, 0u) << error;
    for (uint32_t seq = 1; seq <= 3; ++seq) ASSERT_TRUE(send_frame(*b, conn, message(seq, 100)));
    EXPECT_GT(b->queued_bytes(conn), 0u);
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return rb.connected.size() == 1; }));
    ASSERT_TRUE(send_frame(*b, conn, message(4, 100)));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == 4; }));
    for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(ra.frames[i].h.seq, i + 1);
    EXPECT_EQ(b->queued_bytes(conn), 0u);
}

TEST(TcpTransport, ConnectToAClosedPortFails) {
    Recorder r;
    auto t = tcp(r);
    const uint16_t port = free_port();
    std::string error;
    const ConnId conn = t->connect("127.0.0.1", port, &error);
    if (conn == 0) {  // the kernel may refuse at once
        EXPECT_NE(error.find("refused"), std::string::npos) << error;
        return;
    }
    ASSERT_TRUE(pump({t.get()}, [&] { return !r.connect_failed.empty(); }));
    EXPECT_EQ(r.connect_failed[0].first, conn);
    EXPECT_NE(r.connect_failed[0].second.find("Connection refused"), std::string::npos)
        << r.connect_failed[0].second;
    t->poll(0);
    EXPECT_TRUE(r.closed.empty());  // a connection that never opened is not closed
    EXPECT_TRUE(r.connected.empty());
}

// A listener with a full accept queue ignores further SYNs: the connect hangs
// until the transport's own timeout, whose timer wakes the owner.
TEST(TcpTransport, ConnectTimesOut) {
    const uint16_t port = free_port();
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(listen(listener, 0), 0);
    const int filler = raw_connect(port);
    ASSERT_GE(filler, 0);

    Recorder r;
    TcpOptions opts;
    opts.connect_timeout_ms = 300;
    auto t = tcp(r, opts);
    std::string error;
    const auto start = Clock::now();
    const ConnId conn = t->connect("127.0.0.1", port, &error);
    ASSERT_NE(conn, 0u) << error;
    t->poll(0);
    ASSERT_TRUE(readable(t->wait_fd(), 5000));
    ASSERT_TRUE(pump({t.get()}, [&] { return !r.connect_failed.empty(); }));
    const auto waited = Clock::now() - start;
    EXPECT_GE(waited, std::chrono::milliseconds(300));
    EXPECT_LT(waited, std::chrono::seconds(3));
    EXPECT_EQ(r.connect_failed[0].first, conn);
    EXPECT_NE(r.connect_failed[0].second.find("timed out after 300 ms"), std::string::npos)
        << r.connect_failed[0].second;
    close(filler);
    close(listener);
}

TEST(TcpTransport, Ipv6AndHostNames) {
    const uint16_t port6 = free_port("::1");
    if (port6 == 0) GTEST_SKIP() << "no IPv6 loopback";
    Recorder ra, rb;
    auto a = tcp(ra), b = tcp(rb);
    std::string error;
    ASSERT_TRUE(a->listen("::1", port6, &error)) << error;
    ASSERT_NE(b->connect("::1", port6, &error), 0u) << error;
    ASSERT_TRUE(pump({a.get(), b.get()},
                     [&] { return ra.accepted.size() == 1 && rb.connected.size() == 1; }));
    EXPECT_EQ(ra.accepted[0].second, "::1");

    // "" listens on every address family; "localhost" resolves to one of them.
    const uint16_t port = free_port();
    ASSERT_TRUE(a->listen("", port, &error)) << error;
    ASSERT_NE(b->connect("localhost", port, &error), 0u) << error;
    ASSERT_TRUE(pump({a.get(), b.get()},
                     [&] { return ra.accepted.size() == 2 && rb.connected.size() == 2; }));
    const std::string host = ra.accepted[1].second;
    EXPECT_TRUE(host == "127.0.0.1" || host == "::1") << host;
}

TEST(TcpTransport, ListenReportsAPortInUse) {
    Recorder ra, rb;
    auto a = tcp(ra), b = tcp(rb);
    const uint16_t port = free_port();
    std::string error;
    ASSERT_TRUE(a->listen("127.0.0.1", port, &error)) << error;
    EXPECT_FALSE(b->listen("127.0.0.1", port, &error));
    EXPECT_NE(error.find("Address already in use"), std::string::npos) << error;
}
