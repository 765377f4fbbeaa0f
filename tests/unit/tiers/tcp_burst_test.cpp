// The TCP tier's MSG_MORE hint (push_more, a connection closed in a pass, the
// kernel's ceiling when nothing pushes), three-piece frames queued in part,
// FrameGuard::seal_apart against seal() through empty payloads and rekeys, and
// ShmRing::peek_next: checks from a review of the burst and mac changes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ic/shm/shm_ring.hpp"
#include "ic/wire/frame.hpp"
#include "ic/wire/frame_guard.hpp"
#include "tiers/transports.hpp"
#include "tiers/transport_test_support.hpp"

using namespace pgrac;
using namespace pgrac::tiers;
using namespace pgrac::tiers::transporttest;

namespace {

constexpr auto kWait = std::chrono::seconds(20);

bool pump(std::initializer_list<Transport*> ts, const std::function<bool()>& done,
          std::chrono::milliseconds limit = kWait) {
    return pump_until(ts, done, limit, 5);
}

class TcpMoreReview : public ::testing::Test {
  protected:
    void SetUp() override {
        TcpOptions o;
        o.sndbuf = o.rcvbuf = 64 * 1024;  // small: big frames are written in part, then queued
        a = make_tcp_transport(ra, o);
        b = make_tcp_transport(rb, o);
        const uint16_t port = free_port();
        std::string error;
        ASSERT_TRUE(a->listen("127.0.0.1", port, &error)) << error;
        bconn = b->connect("127.0.0.1", port, &error);
        ASSERT_NE(bconn, 0u) << error;
        ASSERT_TRUE(pump({a.get(), b.get()},
                         [&] { return rb.connected.size() == 1 && !ra.accepted.empty(); }));
    }
    Recorder ra, rb;
    std::unique_ptr<Transport> a, b;
    ConnId bconn = 0;
};

// Header, payload and tag as three pieces, hinted: the ones that do not fit
// the socket are queued as a copy (TcpSendQueue::push skips across the piece
// boundaries), so the caller may reuse all three buffers as soon as send()
// returns (the engine's hdr/tag are stack arrays, the payload the retained frame).
TEST_F(TcpMoreReview, ThreePieceFramesQueuedInPartKeepTheirBytes) {
    constexpr uint32_t kFrames = 60;
    std::vector<std::vector<uint8_t>> sent;
    b->set_more(true);
    for (uint32_t seq = 1; seq <= kFrames; ++seq) {
        std::vector<uint8_t> body(1000 + seq * 1013);
        for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<uint8_t>(seq * 7 + i);
        std::vector<uint8_t> tail(16, static_cast<uint8_t>(seq));
        ic::FrameHeader h;
        h.type = ic::FrameType::Message;
        h.seq = seq;
        h.src_node = 2;
        h.payload_len = static_cast<uint32_t>(body.size() + tail.size());
        std::vector<uint8_t> whole(ic::kFrameHeaderSize);
        std::vector<uint8_t> payload = body;
        payload.insert(payload.end(), tail.begin(), tail.end());
        ic::encode_frame_header(h, payload.data(), whole.data());
        iovec iov[3] = {{whole.data(), ic::kFrameHeaderSize},
                        {body.data(), body.size()},
                        {tail.data(), tail.size()}};
        if (seq == kFrames) b->set_more(false);
        ASSERT_TRUE(b->send(bconn, iov, 3));
        sent.push_back(payload);
        std::memset(whole.data(), 0xAA, whole.size());  // reused at once
        std::memset(body.data(), 0xBB, body.size());
        std::memset(tail.data(), 0xCC, tail.size());
    }
    EXPECT_GT(b->queued_bytes(bconn), 0u) << "the test wants the queue path";
    b->push_more();
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == kFrames; }));
    for (uint32_t i = 0; i < kFrames; ++i) {
        ASSERT_EQ(ra.frames[i].h.seq, i + 1);
        EXPECT_EQ(ra.frames[i].payload, sent[i]) << i;
    }
}

// A connection closed while it holds a hinted frame: push_more() skips it
// (and forgets it); the next pass works on the others.
TEST_F(TcpMoreReview, PushMoreSkipsAConnectionClosedInThePass) {
    const auto f = [](uint32_t seq) {
        ic::FrameHeader h;
        h.type = ic::FrameType::Message;
        h.seq = seq;
        return make_frame(h, std::vector<uint8_t>(100, 1));
    };
    b->set_more(true);
    ASSERT_TRUE(send_frame(*b, bconn, f(1)));
    b->close(bconn);
    b->set_more(false);
    b->push_more();
    b->push_more();  // nothing left to push
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return !ra.closed.empty(); }));
}

// A hinted frame that nobody pushes stays in the kernel until its probe timer
// (~200 ms, the RTO floor): what push_more() is for. Documents the ceiling.
TEST_F(TcpMoreReview, UnpushedHintedFrameWaitsForTheKernel) {
    ic::FrameHeader h;
    h.type = ic::FrameType::Message;
    h.seq = 1;
    const auto frame = make_frame(h, std::vector<uint8_t>(100, 1));
    b->set_more(true);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(send_frame(*b, bconn, frame));
    b->set_more(false);
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == 1; }));
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    EXPECT_GE(ms, 150) << "held by the kernel without push_more()";
    b->push_more();
}

// seal_apart is seal() also for an empty payload and across key roll-overs
// (begin() rekeys from the counter; seal_apart counts as seal does).
TEST(SealApartReview, EmptyPayloadsAndRekeysMatchSeal) {
    ic::SessionKeys k;
    k.send.fill(9);
    k.recv.fill(8);
    ic::FrameGuard one(ic::WireProtection::Mac, k, 3), apart(ic::WireProtection::Mac, k, 3);
    for (uint32_t seq = 1; seq <= 20; ++seq) {
        const size_t n = seq % 4 == 0 ? 0 : seq * 37;
        std::vector<uint8_t> in(n, static_cast<uint8_t>(seq));
        ic::FrameHeader h;
        h.type = ic::FrameType::Message;
        h.seq = seq;
        h.src_node = 4;
        std::vector<uint8_t> whole;
        one.seal(h, in.data(), static_cast<uint32_t>(n), &whole);
        uint8_t hdr[ic::kFrameHeaderSize], tag[ic::kFrameTagSize];
        apart.seal_apart(h, n == 0 ? nullptr : in.data(), static_cast<uint32_t>(n), hdr, tag);
        std::vector<uint8_t> wire(hdr, hdr + sizeof hdr);
        wire.insert(wire.end(), in.begin(), in.end());
        wire.insert(wire.end(), tag, tag + sizeof tag);
        ASSERT_EQ(wire, whole) << seq;
    }
}

// For the fix of finding 1 (ShmRing::peek_next, only with the fix applied):
// the record behind the head, across a wrap (skip marker), none at the end.
TEST(RingMoreReview, PeekNextCrossesTheWrap) {
    std::vector<uint64_t> mem(ic::ShmRing::bytes_needed(4096) / 8 + 1);
    ic::ShmRing r = ic::ShmRing::create(mem.data(), 4096);
    std::vector<uint8_t> big(1500, 1), small(10, 2);
    const uint8_t* d;
    size_t n;
    EXPECT_FALSE(r.peek_next(&d, &n));
    ASSERT_EQ(r.push(big.data(), big.size()), ic::ShmRing::Push::Ok);
    ASSERT_EQ(r.push(big.data(), big.size()), ic::ShmRing::Push::Ok);
    EXPECT_FALSE(r.peek_next(&d, &n) && n != big.size());
    r.pop();
    big.assign(1500, 3);
    ASSERT_EQ(r.push(big.data(), big.size()), ic::ShmRing::Push::Ok);  // wraps: skip marker first
    ASSERT_TRUE(r.peek_next(&d, &n));
    EXPECT_EQ(n, big.size());
    EXPECT_EQ(d[0], 3);
    r.pop();
    EXPECT_FALSE(r.peek_next(&d, &n));
    ASSERT_TRUE(r.peek(&d, &n));
    EXPECT_EQ(d[0], 3);
}

}  // namespace
