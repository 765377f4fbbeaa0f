// Session: scripted losses and reconnects between a sender and a receiver,
// duplicates, gaps, acks, limits, wraparound across 2^32 and reset.
#include "ic/session/session.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <vector>

namespace pgrac::ic {

// Puts a session just below the 2^32 wrap without sending four billion frames.
struct SessionTestAccess {
    static void start_at(Session& s, uint32_t next_seq, uint32_t last_received) {
        s.next_seq_ = next_seq;
        s.last_received_ = last_received;
        s.last_ack_sent_ = last_received;
    }
};

namespace {

using Frame = pgrac::ic::FrameBuffer;

// A frame as the session keeps it.
pgrac::ic::KeptFrameRef kept(Frame f) {
    auto k = std::make_shared<pgrac::ic::KeptFrame>();
    k->bytes = std::move(f);
    return k;
}

// A test frame: seq, then the message id, both little-endian.
Frame make_frame(uint32_t seq, uint32_t id) {
    Frame f;
    for (uint32_t v : {seq, id})
        for (int i = 0; i < 4; ++i) f.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return f;
}
uint32_t field(const Frame& f, int at) {
    return f[at] | (f[at + 1] << 8) | (f[at + 2] << 16) | (static_cast<uint32_t>(f[at + 3]) << 24);
}
uint32_t seq_of(const Frame& f) {
    return field(f, 0);
}
uint32_t id_of(const Frame& f) {
    return field(f, 4);
}

// Sender and receiver joined by a link that can lose everything in flight.
struct Link {
    Session sender, receiver;
    std::deque<Frame> wire;           // sender -> receiver, in order
    std::vector<uint32_t> delivered;  // message ids the receiver passed up
    uint32_t next_id = 1;

    explicit Link(Session::Limits limits = {}) : sender(limits) {}

    void send() {
        const uint32_t seq = sender.next_seq();
        Frame f = make_frame(seq, next_id++);
        wire.push_back(f);
        sender.retain(seq, kept(std::move(f)));
    }
    // Delivers up to n frames from the wire.
    void deliver(size_t n) {
        for (; n > 0 && !wire.empty(); --n) {
            const Frame f = wire.front();
            wire.pop_front();
            if (receiver.on_receive(seq_of(f)) == Session::Receive::Deliver)
                delivered.push_back(id_of(f));
        }
    }
    void ack() {
        sender.on_ack(receiver.last_received());
        receiver.ack_sent(receiver.last_received());
    }
    // The connection drops (frames in flight are lost) and comes back; the
    // handshake tells the sender what the receiver last got.
    std::vector<uint32_t> reconnect(uint32_t reported_last_received) {
        wire.clear();
        std::vector<uint32_t> seqs;
        for (const pgrac::ic::KeptFrame* f : sender.resend_after(reported_last_received)) {
            seqs.push_back(seq_of(f->bytes));
            wire.push_back(f->bytes);
        }
        return seqs;
    }
};

std::vector<uint32_t> range(uint32_t first, uint32_t last) {
    std::vector<uint32_t> v;
    for (uint32_t i = first; i <= last; ++i) v.push_back(i);
    return v;
}

TEST(Session, ScriptedLossesAndReconnects) {
    Link l;
    for (int i = 0; i < 10; ++i) l.send();
    l.deliver(4);
    EXPECT_EQ(l.sender.on_ack(2), 2u);  // an ack for 1..2 got through before the drop
    EXPECT_EQ(l.reconnect(l.receiver.last_received()), range(5, 10));
    EXPECT_EQ(l.sender.unacked_msgs(), 6u);

    l.deliver(3);  // 5..7, then another drop; 11 and 12 are lost with it
    l.send();
    l.send();
    EXPECT_EQ(l.reconnect(l.receiver.last_received()), range(8, 12));

    l.deliver(100);
    EXPECT_EQ(l.delivered, range(1, 12));
    l.ack();
    EXPECT_EQ(l.sender.unacked_msgs(), 0u);
    EXPECT_EQ(l.sender.unacked_bytes(), 0u);
}

TEST(Session, StaleReportResendsMoreAndTheReceiverDropsDuplicates) {
    Link l;
    for (int i = 0; i < 6; ++i) l.send();
    l.deliver(4);
    // A report older than what the receiver has: 3 and 4 arrive twice.
    EXPECT_EQ(l.reconnect(2), range(3, 6));
    l.deliver(100);
    EXPECT_EQ(l.delivered, range(1, 6));
}

TEST(Session, RandomizedLossesDeliverEachMessageExactlyOnceInOrder) {
    std::mt19937 rng(12345);
    Link l(Session::Limits{1 << 20, 200});
    constexpr uint32_t kMessages = 20000;
    int reconnects = 0;
    for (int step = 0; step < 1000000 && l.delivered.size() < kMessages; ++step) {
        const int roll = static_cast<int>(rng() % 100);
        if (roll < 50 && l.next_id <= kMessages && l.sender.can_retain(8)) {
            l.send();
        } else if (roll < 85) {
            l.deliver(rng() % 8);
        } else if (roll < 98) {
            if (l.receiver.ack_due()) l.ack();
        } else {
            const uint32_t have = l.receiver.last_received();
            std::vector<uint32_t> resent = l.reconnect(have);
            if (!resent.empty()) {
                EXPECT_EQ(resent.front(), have + 1);
            }  // exactly what is missing
            EXPECT_EQ(resent.size(), l.sender.last_sent() - have);
            ++reconnects;
        }
        ASSERT_LE(l.sender.unacked_msgs(), 200u);
    }
    EXPECT_GT(reconnects, 100);
    EXPECT_EQ(l.delivered, range(1, kMessages));
}

TEST(Session, DuplicatesAndGaps) {
    Session s;
    EXPECT_EQ(s.on_receive(1), Session::Receive::Deliver);
    EXPECT_EQ(s.on_receive(2), Session::Receive::Deliver);
    EXPECT_EQ(s.on_receive(1), Session::Receive::Duplicate);
    EXPECT_EQ(s.on_receive(2), Session::Receive::Duplicate);
    EXPECT_EQ(s.on_receive(0), Session::Receive::Duplicate);
    EXPECT_EQ(s.on_receive(3), Session::Receive::Deliver);
    EXPECT_EQ(s.on_receive(5), Session::Receive::Gap);
    EXPECT_EQ(s.last_received(), 3u);  // a gap changes nothing
    EXPECT_EQ(s.on_receive(4), Session::Receive::Deliver);
    EXPECT_EQ(s.last_received(), 4u);
}

TEST(Session, AckDue) {
    Session s;
    EXPECT_FALSE(s.ack_due());
    s.on_receive(1);
    s.on_receive(2);
    EXPECT_TRUE(s.ack_due());
    s.ack_sent(2);
    EXPECT_FALSE(s.ack_due());
    s.on_receive(2);  // a duplicate needs no new ack
    EXPECT_FALSE(s.ack_due());
}

TEST(Session, AckFreesRetainedFrames) {
    Session s;
    for (int i = 0; i < 10; ++i) {
        const uint32_t seq = s.next_seq();
        s.retain(seq, kept(Frame(100 + i)));
    }
    EXPECT_EQ(s.last_sent(), 10u);
    EXPECT_EQ(s.unacked_msgs(), 10u);
    EXPECT_EQ(s.unacked_bytes(), 1045u);
    EXPECT_EQ(s.on_ack(4), 4u);
    EXPECT_EQ(s.unacked_bytes(), 1045u - (100 + 101 + 102 + 103));
    EXPECT_EQ(s.on_ack(2), 0u);  // an older ack frees nothing
    EXPECT_EQ(s.on_ack(4), 0u);
    EXPECT_EQ(s.on_ack(10), 6u);
    EXPECT_EQ(s.unacked_msgs(), 0u);
    EXPECT_EQ(s.unacked_bytes(), 0u);
    EXPECT_TRUE(s.resend_after(10).empty());
}

TEST(Session, LimitsAreRespected) {
    Session s(Session::Limits{100, 3});
    EXPECT_TRUE(s.can_retain(100));
    EXPECT_FALSE(s.can_retain(101));
    s.retain(s.next_seq(), kept(Frame(40)));
    EXPECT_TRUE(s.can_retain(60));
    EXPECT_FALSE(s.can_retain(61));
    s.retain(s.next_seq(), kept(Frame(10)));
    s.retain(s.next_seq(), kept(Frame(10)));
    EXPECT_FALSE(s.can_retain(1));  // three messages retained
    EXPECT_FALSE(s.can_retain(0));
    EXPECT_EQ(s.on_ack(1), 1u);
    EXPECT_TRUE(s.can_retain(80));
    EXPECT_FALSE(s.can_retain(81));
}

TEST(Session, WrapsAroundTwoToTheThirtyTwo) {
    Link l;
    SessionTestAccess::start_at(l.sender, 0xfffffff0u, 0);
    SessionTestAccess::start_at(l.receiver, 0, 0xffffffefu);
    for (int i = 0; i < 40; ++i) l.send();  // seqs 0xfffffff0 .. 0x17, through 0
    EXPECT_EQ(l.sender.last_sent(), 0x17u);
    l.deliver(20);  // up to 0x3
    EXPECT_EQ(l.receiver.last_received(), 3u);
    EXPECT_TRUE(seq_after(3, 0xffffffffu));
    EXPECT_FALSE(seq_after(0xffffffffu, 3));

    EXPECT_EQ(l.sender.on_ack(0xfffffffau), 11u);
    EXPECT_EQ(l.sender.on_ack(0xfffffff5u), 0u);              // before the last ack
    EXPECT_EQ(l.sender.on_ack(1), 7u);                        // 0xfffffffb .. 0x1 across the wrap
    std::vector<uint32_t> resent = l.reconnect(0xfffffffeu);  // a stale report: nothing freed
    ASSERT_EQ(resent.size(), 22u);
    EXPECT_EQ(resent.front(), 2u);
    EXPECT_EQ(resent.back(), 0x17u);

    EXPECT_EQ(l.receiver.on_receive(0xfffffff5u), Session::Receive::Duplicate);
    EXPECT_EQ(l.receiver.on_receive(0), Session::Receive::Duplicate);
    EXPECT_EQ(l.receiver.on_receive(9), Session::Receive::Gap);
    l.deliver(100);
    EXPECT_EQ(l.delivered, range(1, 40));
    l.ack();
    EXPECT_EQ(l.sender.unacked_msgs(), 0u);
}

TEST(Session, ResetForgetsBothDirections) {
    Link l;
    for (int i = 0; i < 5; ++i) l.send();
    l.deliver(3);
    EXPECT_EQ(l.sender.reset(), 5u);
    EXPECT_EQ(l.receiver.reset(), 0u);
    EXPECT_EQ(l.sender.unacked_msgs(), 0u);
    EXPECT_EQ(l.sender.unacked_bytes(), 0u);
    EXPECT_EQ(l.sender.last_sent(), 0u);
    EXPECT_EQ(l.sender.next_seq(), 1u);
    EXPECT_EQ(l.receiver.last_received(), 0u);
    EXPECT_FALSE(l.receiver.ack_due());
    EXPECT_EQ(l.receiver.on_receive(1),
              Session::Receive::Deliver);  // a new incarnation starts at 1
}

}  // namespace
}  // namespace pgrac::ic

namespace pgrac::ic {
namespace {

// What a backoff held back is found again, in order, without acking anything.
TEST(Session, FramesAfterListsHeldFramesAndAcksNothing) {
    Session s;
    for (uint32_t i = 0; i < 6; ++i) {
        const uint32_t seq = s.next_seq();
        s.retain(seq, kept(make_frame(seq, 100 + i)));
    }
    const auto held = s.frames_after(3);
    ASSERT_EQ(held.size(), 3u);
    EXPECT_EQ(held[0].seq, 4u);
    EXPECT_EQ(seq_of((*held[0].frame)->bytes), 4u);
    EXPECT_EQ(seq_of((*held[2].frame)->bytes), 6u);
    EXPECT_EQ(s.frames_after(0).size(), 6u) << "nothing was acked by looking";
    EXPECT_TRUE(s.frames_after(6).empty());
    s.on_ack(4);
    EXPECT_EQ(s.frames_after(0).size(), 2u);
}

}  // namespace
}  // namespace pgrac::ic
