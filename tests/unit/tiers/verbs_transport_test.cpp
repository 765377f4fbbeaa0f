// The verbs tier over a real RDMA device: two transports in one process, one
// listening and one dialing over the device's IP address (RXEVM_IPADDR in the
// soft-RoCE VM; PGRAC_VERBS_ADDR overrides; else 127.0.0.1). Without an RDMA
// device (the usual host) every test here is skipped with the reason.
// tests/rxe/verbs_transport_in_vm.sh runs them in the VM and fails on a skip.
#include <gtest/gtest.h>

#include <array>

#include <poll.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ic/wire/frame.hpp"
#include "tiers/detect/rdma_live.hpp"
#include "ic/transport/transport.hpp"
#include "tiers/verbs/transport.hpp"
#include "tiers/transport_test_support.hpp"
#include "tiers/verbs_test_support.hpp"

using namespace pgrac;
using namespace pgrac::tiers;
using namespace pgrac::tiers::transporttest;
using namespace pgrac::tiers::verbstest;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kWait = std::chrono::seconds(60);  // TCG emulation is slow

// Runs the transports as an owner would (sleeping on their wait fds).
bool pump(std::initializer_list<Transport*> ts, const std::function<bool()>& done,
          std::chrono::seconds limit = kWait) {
    return pump_until(ts, done, limit, 20);
}

class VerbsPair : public ::testing::Test {
  protected:
    void SetUp() override {
        const std::string why = skip_reason();
        if (!why.empty()) GTEST_SKIP() << why;
    }

    // A listens on the test address, B dials it.
    void connect_pair(const VerbsOptions& ao = small_options(),
                      const VerbsOptions& bo = small_options()) {
        std::string error;
        a = make_verbs_transport(ra, ao, &error);
        ASSERT_NE(a, nullptr) << error;
        b = make_verbs_transport(rb, bo, &error);
        ASSERT_NE(b, nullptr) << error;
        addr = test_addr();
        for (int i = 0; i < 20; ++i) {
            port = test_port();
            if (a->listen(addr, port, &error)) break;
            port = 0;
        }
        ASSERT_NE(port, 0) << error;
        dial();
    }

    void dial() {
        std::string error;
        const size_t nc = rb.connected.size(), na = ra.accepted.size();
        bconn = b->connect(addr, port, &error);
        ASSERT_NE(bconn, 0u) << error;
        ASSERT_TRUE(pump({a.get(), b.get()}, [&] {
            return (rb.connected.size() > nc && ra.accepted.size() > na) ||
                   !rb.connect_failed.empty();
        }));
        ASSERT_TRUE(rb.connect_failed.empty()) << rb.connect_failed[0].second;
        EXPECT_EQ(rb.connected.back(), bconn);
        aconn = ra.accepted.back().first;
    }

    // n round trips of size-byte payloads (b -> a -> b); median microseconds.
    double ping_pong(int n, size_t size) {
        std::vector<double> us;
        for (int i = 0; i < n; ++i) {
            const auto t0 = Clock::now();
            const auto req = message(static_cast<uint32_t>(i + 1), size);
            const size_t fa = ra.frames.size(), fb = rb.frames.size();
            EXPECT_TRUE(send_frame(*b, bconn, req));
            if (!pump({a.get(), b.get()}, [&] { return ra.frames.size() > fa; })) return -1;
            EXPECT_TRUE(payload_matches(ra.frames.back(), req));
            EXPECT_TRUE(send_frame(*a, aconn, req));
            if (!pump({a.get(), b.get()}, [&] { return rb.frames.size() > fb; })) return -1;
            EXPECT_TRUE(payload_matches(rb.frames.back(), req));
            EXPECT_EQ(rb.frames.back().h.seq, static_cast<uint32_t>(i + 1));
            us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
        std::sort(us.begin(), us.end());
        return us[us.size() / 2];
    }

    Recorder ra, rb;
    std::unique_ptr<Transport> a, b;
    std::string addr;
    uint16_t port = 0;
    ConnId aconn = 0, bconn = 0;
};

}  // namespace

TEST_F(VerbsPair, ConnectsAndReportsStatus) {
    connect_pair();
    EXPECT_STREQ(a->name(), "verbs");
    EXPECT_EQ(ra.accepted.back().second, addr);
    EXPECT_EQ(a->max_payload(), 16u * 1024);
    VerbsStatus s;
    ASSERT_TRUE(verbs_transport_status(*a, &s));
    EXPECT_FALSE(s.device.empty());
    EXPECT_TRUE(s.tier == "tier1" || s.tier == "tier2") << s.tier;
    EXPECT_TRUE(s.srq_in_use);
    EXPECT_FALSE(s.xrc_in_use);
    EXPECT_FALSE(s.xrc_srq_note.empty());
    EXPECT_GE(s.gid_index, 0);
    EXPECT_GE(s.cq_depth, 1024);
    std::printf(
        "[ status ] device=%s vendor=%s link=%s tier=%s mtu=%d gid_index=%d gid=%s type=%s\n"
        "[ status ] xrc_supported=%d srq=%d note='%s'\n"
        "[ status ] hugepage=%llu pool=%zu warning='%s' numa=%d ('%s')\n"
        "[ status ] cq_depth=%d max_inline=%u qp_send_depth=%u srq_depth=%u cq_note='%s'\n",
        s.device.c_str(), s.vendor.c_str(), s.link_layer.c_str(), s.tier.c_str(), s.active_mtu,
        s.gid_index, s.gid.c_str(), s.gid_type.c_str(), s.xrc_supported, s.srq_in_use,
        s.xrc_srq_note.c_str(), static_cast<unsigned long long>(s.hugepage_size), s.pool_bytes,
        s.hugepage_warning.c_str(), s.numa_node, s.numa_note.c_str(), s.cq_depth, s.max_inline,
        s.qp_send_depth, s.srq_depth, s.cq_note.c_str());
    EXPECT_TRUE(ra.closed.empty() && rb.closed.empty());
}

TEST_F(VerbsPair, ConnectToNobodyFails) {
    std::string error;
    b = make_verbs_transport(rb, small_options(), &error);
    ASSERT_NE(b, nullptr) << error;
    const ConnId c = b->connect(test_addr(), test_port(), &error);
    ASSERT_NE(c, 0u) << error;
    ASSERT_TRUE(pump({b.get()}, [&] { return !rb.connect_failed.empty(); }));
    EXPECT_EQ(rb.connect_failed[0].first, c);
    EXPECT_NE(rb.connect_failed[0].second.find("failed"), std::string::npos)
        << rb.connect_failed[0].second;
}

TEST_F(VerbsPair, PingPong64BAnd8KiB) {
    connect_pair();
    const double small = ping_pong(200, 64);
    const double block = ping_pong(100, 8192);
    ASSERT_GT(small, 0);
    ASSERT_GT(block, 0);
    std::printf("[ latency ] verbs transport round trip p50: 64 B %.1f us, 8 KiB %.1f us\n", small,
                block);
    const TransportCounters ca = a->counters(), cb = b->counters();
    EXPECT_EQ(ca.frames_recv, 300u);
    EXPECT_EQ(cb.frames_recv, 300u);
    EXPECT_EQ(ca.frames_sent, 300u);
    EXPECT_EQ(cb.verbs_recvs, 300u);
    EXPECT_EQ(ca.cq_overflows + cb.cq_overflows + ca.qp_errors + cb.qp_errors, 0u);
    EXPECT_TRUE(ra.closed.empty() && rb.closed.empty());
}

TEST_F(VerbsPair, BurstLargerThanSendQueueArrivesInOrder) {
    VerbsOptions o = small_options();
    o.qp_send_depth = 8;
    o.send_slots = 16;
    connect_pair(o, o);
    constexpr uint32_t kFrames = 1000;
    ra.keep_frames = false;
    uint32_t expect_seq = 1;
    bool in_order = true;
    ra.frame_hook = [&](ConnId, const ic::FrameHeader& h, const uint8_t*) {
        if (h.seq != expect_seq) in_order = false;
        ++expect_seq;
    };
    for (uint32_t i = 1; i <= kFrames; ++i)
        ASSERT_TRUE(send_frame(*b, bconn, message(i, i % 3 == 0 ? 8192 : 100)));
    EXPECT_GT(b->queued_bytes(bconn), 0u);  // most of it waits in user space
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frame_count == kFrames; }))
        << ra.frame_count << " of " << kFrames;
    EXPECT_TRUE(in_order);
    EXPECT_EQ(b->queued_bytes(bconn), 0u);
    const TransportCounters cb = b->counters();
    EXPECT_GT(cb.send_queue_waits, 0u);
    EXPECT_EQ(cb.frames_sent, kFrames);
    EXPECT_TRUE(pump({a.get(), b.get()}, [&] { return verbs_in_flight(*b, bconn) == 0; }));
    EXPECT_EQ(b->counters().verbs_sends, kFrames);
    std::printf("[ burst ] %u frames through an 8-deep send queue: %llu waited in user space\n",
                kFrames, static_cast<unsigned long long>(cb.send_queue_waits));
    EXPECT_TRUE(ra.closed.empty() && rb.closed.empty());
}

// The dialer sends as soon as it sees ESTABLISHED; the acceptor reads its CQ
// before its CM events, so that first frame can complete on a connection it
// has not announced yet. It must be delivered, after exactly one on_accepted
// (it was dropped, and the engine's handshake then stalled until its timeout).
TEST_F(VerbsPair, FirstFrameBeforeTheAcceptorsEstablishedIsKept) {
    std::string error;
    a = make_verbs_transport(ra, small_options(), &error);
    ASSERT_NE(a, nullptr) << error;
    b = make_verbs_transport(rb, small_options(), &error);
    ASSERT_NE(b, nullptr) << error;
    addr = test_addr();
    for (int i = 0; i < 20 && !a->listen(addr, port = test_port(), &error); ++i) port = 0;
    ASSERT_NE(port, 0) << error;
    bconn = b->connect(addr, port, &error);
    ASSERT_NE(bconn, 0u) << error;
    // b (polled last) sends the RTU and announces in the same poll: the
    // pump stops there, before a has looked at its CM channel again.
    ASSERT_TRUE(pump({a.get(), b.get()},
                     [&] { return !rb.connected.empty() || !rb.connect_failed.empty(); }));
    ASSERT_TRUE(rb.connect_failed.empty()) << rb.connect_failed[0].second;
    ASSERT_TRUE(ra.accepted.empty()) << "the acceptor announced first: the race was not set up";
    const auto req = message(1, 64);
    ASSERT_TRUE(send_frame(*b, bconn, req));
    ::poll(nullptr, 0, 300);  // the frame and the RTU both reach a before it polls
    ASSERT_TRUE(pump(
        {a.get(), b.get()}, [&] { return !ra.frames.empty(); }, std::chrono::seconds(10)))
        << "the first frame was lost";
    ASSERT_EQ(ra.accepted.size(), 1u);
    EXPECT_EQ(ra.frames[0].conn, ra.accepted[0].first);
    EXPECT_TRUE(payload_matches(ra.frames[0], req));
    // The late ESTABLISHED event announces nothing twice, and the connection works.
    pump(
        {a.get(), b.get()}, [] { return false; }, std::chrono::seconds(1));
    EXPECT_EQ(ra.accepted.size(), 1u);
    aconn = ra.accepted[0].first;
    EXPECT_GT(ping_pong(3, 64), 0);
    EXPECT_TRUE(ra.closed.empty() && rb.closed.empty());
}

TEST_F(VerbsPair, PeerCloseIsReported) {
    connect_pair();
    a->close(aconn);
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return !ra.closed.empty() && !rb.closed.empty(); }));
    EXPECT_EQ(ra.closed[0].conn, aconn);
    EXPECT_EQ(ra.closed[0].reason, "closed locally");
    EXPECT_EQ(rb.closed[0].conn, bconn);
    EXPECT_NE(rb.closed[0].reason.find("peer closed"), std::string::npos) << rb.closed[0].reason;
    EXPECT_EQ(rb.closed[0].frame_error, ic::FrameError::None);
    EXPECT_FALSE(b->send(bconn, nullptr, 0));
    // The listener still accepts.
    dial();
    EXPECT_GT(ping_pong(3, 64), 0);
}

TEST_F(VerbsPair, BadChecksumClosesWithFrameError) {
    connect_pair();
    auto bad = message(1, 200);
    bad.back() ^= 0xff;  // payload no longer matches the CRC
    ASSERT_TRUE(send_frame(*b, bconn, bad));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return !ra.closed.empty() && !rb.closed.empty(); }));
    EXPECT_TRUE(ra.frames.empty());
    EXPECT_EQ(ra.closed[0].conn, aconn);
    EXPECT_EQ(ra.closed[0].frame_error, ic::FrameError::BadChecksum);
    EXPECT_NE(ra.closed[0].reason.find("bad_checksum"), std::string::npos) << ra.closed[0].reason;
}

// A connection starts at initial_max_payload; set_max_payload raises it.
TEST_F(VerbsPair, FrameAboveTheConnectionLimitClosesUntilRaised) {
    VerbsOptions ao = small_options();
    ao.initial_max_payload = 1024;
    connect_pair(ao, small_options());
    const auto frame = message(1, 2000);
    a->set_max_payload(aconn, 4096);
    ASSERT_TRUE(send_frame(*b, bconn, frame));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == 1; }));
    EXPECT_TRUE(payload_matches(ra.frames[0], frame));

    dial();  // a new connection starts at the initial limit again
    ASSERT_TRUE(send_frame(*b, bconn, frame));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return !ra.closed.empty(); }));
    EXPECT_EQ(ra.closed[0].conn, aconn);
    EXPECT_EQ(ra.closed[0].frame_error, ic::FrameError::PayloadTooLarge);
    EXPECT_EQ(ra.frames.size(), 1u);
}

TEST_F(VerbsPair, ZeroCopyUsesTheMrCache) {
    VerbsOptions o = small_options();
    o.zero_copy_min = 4096;
    connect_pair(o, o);
    const auto frame = message(1, 8192);  // one buffer, sent again and again
    iovec iov[2] = {{const_cast<uint8_t*>(frame.data()), ic::kFrameHeaderSize},
                    {const_cast<uint8_t*>(frame.data()) + ic::kFrameHeaderSize,
                     frame.size() - ic::kFrameHeaderSize}};
    for (int i = 0; i < 50; ++i) {
        ASSERT_TRUE(b->send(bconn, iov, 2));
        ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return verbs_in_flight(*b, bconn) == 0; }));
    }
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == 50; }));
    for (const ReceivedFrame& f : ra.frames) EXPECT_TRUE(payload_matches(f, frame));
    const TransportCounters cb = b->counters();
    EXPECT_EQ(cb.zero_copy_sends, 50u);
    EXPECT_EQ(cb.mr_cache_misses, 1u);
    EXPECT_EQ(cb.mr_cache_hits, 49u);
    std::printf("[ mr cache ] hits %llu misses %llu (hit rate %.1f %%)\n",
                static_cast<unsigned long long>(cb.mr_cache_hits),
                static_cast<unsigned long long>(cb.mr_cache_misses),
                100.0 * cb.mr_cache_hits / (cb.mr_cache_hits + cb.mr_cache_misses));
}

// Registered ahead only: a payload elsewhere is copied (nothing registered on
// the fly); one in a registered region leaves from it, and the region reads
// as in flight from the post to the completion.
TEST_F(VerbsPair, ZeroCopyFromRegisteredRegionsOnly) {
    VerbsOptions o = small_options();
    o.zero_copy_min = 2048;
    o.zero_copy_registered_only = true;
    connect_pair(o, o);
    const auto frame = message(1, 8192);
    std::vector<uint8_t> region(frame.begin(), frame.end());
    auto iov_of = [](std::vector<uint8_t>& f) {
        return std::array<iovec, 2>{
            iovec{f.data(), ic::kFrameHeaderSize},
            iovec{f.data() + ic::kFrameHeaderSize, f.size() - ic::kFrameHeaderSize}};
    };
    std::vector<uint8_t> plain(frame.begin(), frame.end());
    auto iov = iov_of(plain);
    ASSERT_TRUE(b->send(bconn, iov.data(), 2));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == 1; }));
    EXPECT_EQ(b->counters().zero_copy_sends, 0u) << "not registered ahead: copied";
    EXPECT_EQ(b->counters().mr_cache_misses, 0u) << "and not registered on the fly";

    std::string err;
    ASSERT_TRUE(verbs_register_region(*b, region.data(), region.size(), &err)) << err;
    EXPECT_FALSE(verbs_region_in_flight(*b, region.data(), region.size()));
    iov = iov_of(region);
    ASSERT_TRUE(b->send(bconn, iov.data(), 2));
    EXPECT_TRUE(verbs_region_in_flight(*b, region.data(), region.size()))
        << "posted: the device may still read it";
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] {
        return ra.frames.size() == 2 && !verbs_region_in_flight(*b, region.data(), region.size());
    }));
    EXPECT_TRUE(payload_matches(ra.frames[1], frame));
    EXPECT_EQ(b->counters().zero_copy_sends, 1u);
    EXPECT_EQ(b->counters().mr_cache_hits, 1u);
}

// Frames by RDMA WRITE: B offers landing slots when it dials, A writes its
// large frames into them, B's SENDs give the slots back. Small frames are
// still SENT; every frame arrives whole and in order.
TEST_F(VerbsPair, LandingRequestAndReplyWritesTheReply) {
    connect_pair(writer_options(), landing_options());
    for (uint32_t i = 1; i <= 40; ++i) {
        const auto req = message(i, 64);
        const size_t fa = ra.frames.size(), fb = rb.frames.size();
        ASSERT_TRUE(send_frame(*b, bconn, req));
        ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() > fa; }));
        const auto reply = message(i, i % 2 == 0 ? 8192 : 64);
        ASSERT_TRUE(send_frame(*a, aconn, reply));
        ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return rb.frames.size() > fb; }));
        EXPECT_TRUE(payload_matches(rb.frames.back(), reply)) << i;
        EXPECT_EQ(rb.frames.back().h.seq, i);
    }
    EXPECT_EQ(a->counters().rdma_writes, 20u) << "the 8 KiB replies";
    EXPECT_EQ(b->counters().landed_frames, 20u);
    EXPECT_EQ(b->counters().rdma_writes, 0u) << "A offered nothing";
    EXPECT_TRUE(ra.closed.empty() && rb.closed.empty());
}

TEST_F(VerbsPair, LandingWithoutCreditsTheWriterSends) {
    connect_pair(writer_options(), landing_options());
    // B sends nothing: after two writes A has no slot and SENDs the rest.
    for (uint32_t i = 1; i <= 10; ++i) ASSERT_TRUE(send_frame(*a, aconn, message(i, 4096)));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return rb.frames.size() == 10; }));
    for (uint32_t i = 1; i <= 10; ++i) {
        EXPECT_EQ(rb.frames[i - 1].h.seq, i) << "in order";
        EXPECT_TRUE(payload_matches(rb.frames[i - 1], message(i, 4096)));
    }
    EXPECT_EQ(a->counters().rdma_writes, 2u);
    // One SEND from B gives both slots back.
    ASSERT_TRUE(send_frame(*b, bconn, message(99, 64)));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == 1; }));
    for (uint32_t i = 11; i <= 12; ++i) ASSERT_TRUE(send_frame(*a, aconn, message(i, 4096)));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return rb.frames.size() == 12; }));
    EXPECT_TRUE(payload_matches(rb.frames[11], message(12, 4096)));
    EXPECT_EQ(a->counters().rdma_writes, 4u);
    EXPECT_EQ(b->counters().landed_frames, 4u);
}

// A frame of header, payload and tag from three places: header and tag are
// copied into one send slot, the payload from its registered region, in
// frame order (three gather entries).
TEST_F(VerbsPair, ThreePieceFrameGathersThePayloadInPlace) {
    VerbsOptions o = writer_options();
    o.zero_copy_min = 2048;
    o.zero_copy_registered_only = true;
    connect_pair(o, landing_options());
    const auto frame = message(1, 8192);
    std::vector<uint8_t> region(frame.begin() + ic::kFrameHeaderSize, frame.end() - 16);
    std::string err;
    ASSERT_TRUE(verbs_register_region(*a, region.data(), region.size(), &err)) << err;
    std::vector<uint8_t> hdr(frame.begin(), frame.begin() + ic::kFrameHeaderSize);
    std::vector<uint8_t> tag(frame.end() - 16, frame.end());
    iovec iov[3] = {{hdr.data(), hdr.size()}, {region.data(), region.size()}, {tag.data(), 16}};
    ASSERT_TRUE(send_frame(*b, bconn, message(1, 64)));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == 1; }));
    ASSERT_TRUE(a->send(aconn, iov, 3));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return rb.frames.size() == 1; }));
    EXPECT_TRUE(payload_matches(rb.frames[0], frame));
    EXPECT_EQ(a->counters().zero_copy_sends, 1u);
    EXPECT_EQ(a->counters().rdma_writes, 1u);
}

// A frame written into a lent send slot (reserve_frame, what sealing under
// secure does) goes out from there: no copy, by SEND or by WRITE. One slot is
// lent at a time, a cancelled one comes back, and nothing is lent for a
// connection whose frames wait in its queue.
TEST_F(VerbsPair, ReservedSlotIsSentAsWritten) {
    connect_pair(writer_options(), landing_options());
    for (uint32_t i = 1; i <= 6; ++i) {
        const auto frame = message(i, i % 2 == 0 ? 8192 : 64);
        uint8_t* room = a->reserve_frame(aconn, frame.size());
        ASSERT_NE(room, nullptr) << i;
        EXPECT_EQ(a->reserve_frame(aconn, frame.size()), nullptr) << "one at a time";
        std::memcpy(room, frame.data(), frame.size());
        ASSERT_TRUE(a->send_reserved(aconn, frame.size()));
        ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return rb.frames.size() == i; }));
        EXPECT_TRUE(payload_matches(rb.frames.back(), frame)) << i;
        // B answers, so that A's landing slots come back.
        ASSERT_TRUE(send_frame(*b, bconn, message(i, 64)));
        ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return ra.frames.size() == i; }));
    }
    EXPECT_EQ(a->counters().zero_copy_sends, 6u);
    EXPECT_EQ(a->counters().rdma_writes, 3u) << "the 8 KiB ones";
    ASSERT_NE(a->reserve_frame(aconn, 100), nullptr);
    a->cancel_reserved(aconn);
    EXPECT_FALSE(a->send_reserved(aconn, 100)) << "cancelled: nothing to send";
    EXPECT_NE(a->reserve_frame(aconn, 100), nullptr) << "the slot came back";
    a->cancel_reserved(aconn);
    EXPECT_EQ(a->reserve_frame(aconn, 16u * 1024 + ic::kFrameHeaderSize + 1), nullptr)
        << "larger than a frame";
    EXPECT_EQ(a->reserve_frame(aconn + 100, 100), nullptr) << "no such connection";
    EXPECT_TRUE(ra.closed.empty() && rb.closed.empty());
}

TEST_F(VerbsPair, TinyCqOverflowIsCountedAndSurvived) {
    VerbsOptions tiny = small_options();
    tiny.cq_depth = 4;
    connect_pair(small_options(), tiny);  // b (the receiver here) has the tiny CQ
    VerbsStatus s;
    ASSERT_TRUE(verbs_transport_status(*b, &s));
    EXPECT_FALSE(s.cq_note.empty());
    // a floods b while b does not poll: b's receive completions pile up.
    constexpr uint32_t kFrames = 120;
    for (uint32_t i = 1; i <= kFrames; ++i) ASSERT_TRUE(send_frame(*a, aconn, message(i, 64)));
    pump(
        {a.get()}, [&] { return verbs_in_flight(*a, aconn) == 0 || !ra.closed.empty(); },
        std::chrono::seconds(10));
    ASSERT_TRUE(pump({a.get(), b.get()}, [&] { return !ra.closed.empty() && !rb.closed.empty(); }))
        << "b overflows " << b->counters().cq_overflows;
    const TransportCounters cb = b->counters();
    EXPECT_GE(cb.cq_overflows, 1u);
    EXPECT_GE(cb.cq_rebuilds, 1u);
    EXPECT_EQ(rb.closed[0].conn, bconn);
    EXPECT_NE(rb.closed[0].reason.find("completion queue"), std::string::npos)
        << rb.closed[0].reason;
    std::printf(
        "[ overflow ] b: cq_overflows=%llu rebuilds=%llu qp_errors=%llu; "
        "b reported '%s'; a reported '%s'\n",
        static_cast<unsigned long long>(cb.cq_overflows),
        static_cast<unsigned long long>(cb.cq_rebuilds),
        static_cast<unsigned long long>(cb.qp_errors), rb.closed[0].reason.c_str(),
        ra.closed[0].reason.c_str());
    ASSERT_TRUE(verbs_transport_status(*b, &s));
    std::printf("[ overflow ] b cq_depth now %d: %s\n", s.cq_depth, s.cq_note.c_str());
    // Survived: b dials again and frames flow both ways, a burst included.
    dial();
    EXPECT_GT(ping_pong(5, 8192), 0);
    const size_t before = rb.frames.size();
    for (uint32_t i = 1; i <= kFrames; ++i) ASSERT_TRUE(send_frame(*a, aconn, message(i, 64)));
    EXPECT_TRUE(pump({a.get(), b.get()}, [&] { return rb.frames.size() == before + kFrames; }));
    EXPECT_EQ(b->counters().cq_overflows, cb.cq_overflows);  // the rebuilt CQ is large enough
}

TEST(VerbsTransport, FactoryFailsClearlyWithoutDevice) {
    if (skip_reason().empty()) GTEST_SKIP() << "an RDMA device is present";
    Recorder r;
    std::string error;
    EXPECT_EQ(make_verbs_transport(r, small_options(), &error), nullptr);
    EXPECT_NE(error.find("RDMA device"), std::string::npos) << error;
    VerbsOptions on = small_options();
    on.use_xrc = XrcMode::kOn;
    EXPECT_EQ(make_verbs_transport(r, on, &error), nullptr);
}
