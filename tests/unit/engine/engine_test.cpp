// The Engine end to end: two or three engines in one process, each with its
// own shared region, over the real TCP transport on 127.0.0.1. The test plays
// the backends (outbound ring, reply slots) and the LMS workers (inbox rings,
// echo replies), and injects faults through a transport decorator
// (tests/unit/engine/test_support.hpp). Every wait is bounded; nothing sleeps to assert.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "engine/fixture.hpp"

namespace pgrac::ic::enginetest {
namespace {

// ---- handshake and liveness

TEST_F(EngineTest, HandshakeBringsBothSidesUp) {
    make(2, [](EngineConfig& c) { c.heartbeat_interval_ms = 20; });
    TestNode& a = node(1);
    TestNode& b = node(2);
    EXPECT_EQ(load_acquire(&a.shm()->listener_ready), 1u);
    EXPECT_STREQ(a.engine().transport_name(), "tcp");
    bring_up();
    for (auto [x, y] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
        PeerShared& p = x->peer(y->id());
        EXPECT_EQ(x->state_of(y->id()), PeerState::Up);
        EXPECT_EQ(p.lanes_total, 2u);  // control lane + tcp_paths = 1
        EXPECT_EQ(load_relaxed(&p.lanes_up), 2u);
        EXPECT_EQ(p.incarnation, 1000u + y->id());
        EXPECT_GE(load_relaxed(&x->shm()->epoch), 1u) << "membership change bumps the epoch";
        EXPECT_GT(p.state_since_us, 0);
        EXPECT_EQ(p.last_error[0], '\0');
        EXPECT_TRUE(x->host().logged("node " + std::to_string(y->id()) + " is UP"));
        // Our own entry is UP with our incarnation.
        EXPECT_EQ(x->state_of(x->id()), PeerState::Up);
        EXPECT_EQ(x->peer(x->id()).incarnation, 1000u + x->id());
        EXPECT_EQ(p.reconnects, 0u);
    }
    // Heartbeats flow: both measure a round trip and hear the other's epoch.
    ASSERT_TRUE(pump([&] {
        return load_relaxed(&a.peer(2).rtt_ns) > 0 && load_relaxed(&b.peer(1).rtt_ns) > 0 &&
               load_relaxed(&a.peer(2).epoch_seen) >= 1 && load_relaxed(&b.peer(1).epoch_seen) >= 1;
    }));
    EXPECT_GT(load_relaxed(&a.peer(2).last_heard_us), 0);
    // Heartbeats are not messages.
    EXPECT_EQ(load_relaxed(&a.peer(2).msgs_sent), 0u);
    EXPECT_EQ(load_relaxed(&b.peer(1).msgs_recv), 0u);
    EXPECT_EQ(a.errors(ErrorType::HandshakeFailed), 0u);
    EXPECT_EQ(a.errors(ErrorType::WrongKey) + b.errors(ErrorType::WrongKey), 0u);
}

TEST_F(EngineTest, ThreeNodeMeshAllPairsTalk) {
    make(3, [](EngineConfig& c) { c.bulk_lanes = 2; });
    bring_up();
    for (uint16_t x = 1; x <= 3; x++) {
        EXPECT_EQ(node(x).peer(x == 1 ? 2 : 1).lanes_total, 3u);
        for (uint16_t y = 1; y <= 3; y++) {
            if (x == y) continue;
            std::vector<uint8_t> reply;
            const auto body = pattern(100 + x * 10 + y, x * 10 + y);
            EXPECT_EQ(rpc(x, y, body, &reply, x), PGRAC_IC_OK) << x << "->" << y;
            EXPECT_EQ(reply, body);
        }
    }
    for (uint16_t x = 1; x <= 3; x++)
        for (uint16_t y = 1; y <= 3; y++)
            if (x != y) {
                EXPECT_EQ(load_relaxed(&node(x).peer(y).rpcs_sent), 1u);
                EXPECT_EQ(load_relaxed(&node(x).peer(y).rpcs_served), 1u);
            }
}

// ---- routing

TEST_F(EngineTest, RpcRoundTripWithPayloadSizes) {
    make(2);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    const std::vector<size_t> sizes = {0, 64, 8192, 65536};
    uint64_t bytes = 0;
    for (size_t i = 0; i < sizes.size(); i++) {
        const auto body = pattern(sizes[i], static_cast<uint32_t>(i));
        std::vector<uint8_t> reply;
        const size_t woken = a.host().woken_procs.size();
        ASSERT_EQ(rpc(1, 2, body, &reply, 3), PGRAC_IC_OK) << sizes[i] << " bytes";
        EXPECT_EQ(reply, body) << sizes[i] << " bytes";
        ASSERT_EQ(a.host().woken_procs.size(), woken + 1) << "the requester is woken once";
        EXPECT_EQ(a.host().woken_procs.back(), 3u);
        bytes += kFrameHeaderSize + kMessageHeaderSize + sizes[i];
    }
    // The request reached B's LMS role once each, flagged as an RPC.
    ASSERT_EQ(b.received.size(), sizes.size());
    for (size_t i = 0; i < sizes.size(); i++) {
        EXPECT_EQ(b.received[i].src, 1);
        EXPECT_TRUE(b.received[i].flags & kFlagRpcRequest);
        EXPECT_EQ(b.received[i].body.size(), sizes[i]);
        EXPECT_EQ(b.received[i].worker, 5u % b.shm()->n_lms) << "route_key picks the worker";
    }
    EXPECT_GE(b.host().woken_lms[5u % b.shm()->n_lms], 1u);
    const PeerShared& ab = a.peer(2);
    const PeerShared& ba = b.peer(1);
    EXPECT_EQ(load_relaxed(&ab.rpcs_sent), sizes.size());
    EXPECT_EQ(load_relaxed(&ba.rpcs_served), sizes.size());
    EXPECT_EQ(load_relaxed(&ab.msgs_sent), sizes.size());
    EXPECT_EQ(load_relaxed(&ba.msgs_recv), sizes.size());
    EXPECT_EQ(load_relaxed(&ba.msgs_sent), sizes.size());  // the replies
    EXPECT_EQ(load_relaxed(&ab.msgs_recv), sizes.size());
    EXPECT_EQ(load_relaxed(&ab.bytes_sent), bytes);
    EXPECT_EQ(load_relaxed(&ba.bytes_recv), bytes);
    EXPECT_EQ(load_relaxed(&ba.bytes_sent), bytes);  // echoes: same sizes back
    EXPECT_EQ(load_relaxed(&ab.bytes_recv), bytes);
    EXPECT_FALSE(a.engine().awaiting_replies());
    // Acks (piggybacked or standalone) drain every queue.
    EXPECT_TRUE(pump([&] { return quiescent(); }));
    EXPECT_EQ(load_relaxed(&ab.retransmits), 0u);
    EXPECT_EQ(load_relaxed(&ab.duplicates_dropped), 0u);
}

TEST_F(EngineTest, RpcToSelfIsDeliveredLocally) {
    make(2);
    TestNode& a = node(1);
    std::vector<uint8_t> reply;
    const auto body = pattern(200, 9);
    // No peer needs to be up for traffic to ourselves.
    ASSERT_EQ(rpc(1, 1, body, &reply, 2), PGRAC_IC_OK);
    EXPECT_EQ(reply, body);
    const PeerShared& self = a.peer(1);
    EXPECT_EQ(load_relaxed(&self.rpcs_sent), 1u);
    EXPECT_EQ(load_relaxed(&self.rpcs_served), 1u);
    EXPECT_EQ(load_relaxed(&self.msgs_sent), 2u);  // request and reply
    EXPECT_EQ(load_relaxed(&self.queued_msgs), 0u);
    EXPECT_EQ(load_relaxed(&self.queued_bytes), 0u);
}

TEST_F(EngineTest, OneRouteKeyArrivesInOrderOnOneWorker) {
    make(2);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    constexpr uint32_t kN = 1000;
    uint32_t pushed = 0;
    // Push in bursts while pumping, so frames go out in many batches.
    ASSERT_TRUE(pump([&] {
        for (int k = 0; k < 37 && pushed < kN; k++, pushed++)
            if (!a.send(2, kStreamType, 7, stream_body(pushed, pushed % 300))) return false;
        return pushed == kN && b.received.size() == kN;
    }));
    EXPECT_EQ(stream_from(b, 1), iota_vec(kN));
    for (const Received& r : b.received) {
        ASSERT_EQ(r.worker, 7u % b.shm()->n_lms);
        ASSERT_EQ(r.mh.route_key, 7u);
        ASSERT_EQ(r.flags & (kFlagRpcRequest | kFlagRpcReply), 0);
    }
    EXPECT_EQ(load_relaxed(&b.peer(1).msgs_recv), kN);
    EXPECT_EQ(load_relaxed(&a.peer(2).msgs_sent), kN);
    EXPECT_TRUE(pump([&] { return quiescent(); }));
}

TEST_F(EngineTest, ControlFlagPicksControlLaneAndRouteKeyPicksBulkLane) {
    make(2, [](EngineConfig& c) { c.bulk_lanes = 2; });
    bring_up();
    TestNode& a = node(1);  // the dialer
    TestNode& b = node(2);  // the acceptor
    EXPECT_EQ(load_relaxed(&a.peer(2).lanes_up), 3u);
    a.net().clear_sent();
    b.net().clear_sent();
    for (uint32_t i = 0; i < 30; i++) {
        const uint16_t flags = i % 3 == 0 ? kFlagControlLane : 0;
        ASSERT_TRUE(a.send(2, kStreamType, i, stream_body(i), flags));
    }
    // RPCs from the acceptor's side; the reply follows the request's lane.
    ASSERT_NE(b.start_rpc(1, 1, 4, pattern(10, 1), kFlagControlLane), 0u);
    ASSERT_NE(b.start_rpc(1, 2, 5, pattern(10, 2)), 0u);
    ASSERT_TRUE(pump([&] { return b.received.size() == 30 && b.rpc_done(1) && b.rpc_done(2); }));
    EXPECT_EQ(b.rpc_status(1), PGRAC_IC_OK);
    EXPECT_EQ(b.rpc_status(2), PGRAC_IC_OK);
    auto expected_lane = [](uint16_t flags, uint32_t key) {
        return (flags & kFlagControlLane) ? 0 : 1 + static_cast<int>(key % 2);
    };
    int per_lane[3] = {0, 0, 0};
    for (const SentMessage& m : a.net().sent()) {
        if (m.flags & kFlagRpcReply) {
            EXPECT_EQ(m.lane, m.mh.rpc_id == make_rpc_id(1, 1) ? 0 : 1 + 5 % 2);
            continue;
        }
        ASSERT_GE(m.lane, 0);
        EXPECT_EQ(m.lane, expected_lane(m.flags, m.mh.route_key)) << "route_key " << m.mh.route_key;
        per_lane[m.lane]++;
    }
    EXPECT_EQ(per_lane[0], 10);  // i % 3 == 0
    EXPECT_EQ(per_lane[1], 10);  // the other even keys
    EXPECT_EQ(per_lane[2], 10);  // the other odd keys
    for (const SentMessage& m : b.net().sent()) {
        ASSERT_TRUE(m.flags & kFlagRpcRequest);
        EXPECT_EQ(m.lane, expected_lane(m.flags, m.mh.route_key));
    }
    // Every lane numbers its own frames from 1, in order.
    std::map<int, std::vector<uint32_t>> seqs;
    for (const SentMessage& m : a.net().sent()) seqs[m.lane].push_back(m.seq);
    for (auto& [lane, v] : seqs)
        for (size_t i = 0; i < v.size(); i++) EXPECT_EQ(v[i], i + 1) << "lane " << lane;
    // Per route key the order holds; all 30 arrived once.
    std::vector<uint32_t> got = stream_from(b, 1);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, iota_vec(30));
}

// ---- sessions: resend and dedupe

TEST_F(EngineTest, DroppedFramesAreResentAfterTheGapForcesAReconnect) {
    make(2);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    constexpr uint32_t kN = 300;
    uint32_t pushed = 0;
    bool armed = false;
    ASSERT_TRUE(pump([&] {
        if (pushed == 100 && !armed) {
            a.net().drop_next_messages(5);  // lost without the connection noticing
            armed = true;
        }
        for (int k = 0; k < 10 && pushed < kN; k++, pushed++)
            if (!a.send(2, kStreamType, 3, stream_body(pushed))) return false;
        return pushed == kN && b.received.size() == kN;
    }));
    EXPECT_EQ(a.net().dropped(), 5u);
    EXPECT_EQ(stream_from(b, 1), iota_vec(kN)) << "exactly once, in order";
    EXPECT_GE(load_relaxed(&a.peer(2).retransmits), 5u);
    EXPECT_GE(load_relaxed(&a.peer(2).reconnects), 1u);
    EXPECT_GE(b.errors(ErrorType::MalformedFrame), 1u) << "the gap is reported";
    EXPECT_EQ(load_relaxed(&b.peer(1).msgs_recv), kN);
    EXPECT_EQ(load_relaxed(&b.peer(1).duplicates_dropped), 0u);
    ASSERT_TRUE(pump([&] { return fully_up() && quiescent(); }));
}

TEST_F(EngineTest, ConnectionKilledUnderneathLosesNothing) {
    make(2);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    constexpr uint32_t kN = 2000;
    uint32_t pushed = 0;
    int kills = 0;
    // Both directions at once; kill every connection several times mid-stream,
    // once right after blackholing a few frames so that a resend is certain.
    ASSERT_TRUE(pump([&] {
        if (pushed > 0 && pushed < kN && pushed % 400 == 0 &&
            kills < static_cast<int>(pushed / 400)) {
            kills++;
            if (kills == 2)
                a.net().drop_next_messages(3, /*close_after=*/true);
            else
                (kills % 2 ? a : b).net().kill_all();
        }
        for (int k = 0; k < 20 && pushed < kN; k++, pushed++) {
            if (!a.send(2, kStreamType, pushed % 2, stream_body(pushed), 0)) return false;
            if (!b.send(1, kStreamType, 1, stream_body(pushed), kFlagControlLane)) return false;
        }
        return pushed == kN && b.received.size() == kN && a.received.size() == kN;
    }));
    EXPECT_EQ(kills, 4);
    std::vector<uint32_t> got = stream_from(b, 1);
    // Route keys 0 and 1 go to different lanes; each key keeps its order.
    std::vector<uint32_t> even, odd;
    for (uint32_t i : got) (i % 2 ? odd : even).push_back(i);
    std::vector<uint32_t> want_even, want_odd;
    for (uint32_t i = 0; i < kN; i++) (i % 2 ? want_odd : want_even).push_back(i);
    EXPECT_EQ(even, want_even);
    EXPECT_EQ(odd, want_odd);
    EXPECT_EQ(stream_from(a, 2), iota_vec(kN));
    EXPECT_GE(load_relaxed(&a.peer(2).retransmits), 3u);
    EXPECT_GE(load_relaxed(&a.peer(2).reconnects), 3u);
    EXPECT_GE(load_relaxed(&b.peer(1).reconnects), 3u);
    EXPECT_EQ(load_relaxed(&b.peer(1).msgs_recv), kN);
    EXPECT_EQ(load_relaxed(&a.peer(2).msgs_recv), kN);
    ASSERT_TRUE(pump([&] { return fully_up() && quiescent(); }));
}

TEST_F(EngineTest, DuplicateAndStaleFramesAreDropped) {
    make(2);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    a.net().keep_history(true);
    a.net().duplicate_next_messages(10);
    for (uint32_t i = 0; i < 50; i++) ASSERT_TRUE(a.send(2, kStreamType, 0, stream_body(i)));
    ASSERT_TRUE(pump([&] {
        return b.received.size() == 50 && load_relaxed(&b.peer(1).duplicates_dropped) == 10;
    }));
    EXPECT_EQ(a.net().duplicated(), 10u);
    // Frames of the old connection written again on a new one (a resend of
    // what was already delivered) are dropped as well.
    a.net().kill_all();
    ASSERT_TRUE(pump([&] { return load_relaxed(&a.peer(2).reconnects) >= 1 && fully_up(); }));
    EXPECT_EQ(a.net().replay_old_messages(), 50u);
    for (uint32_t i = 50; i < 60; i++) ASSERT_TRUE(a.send(2, kStreamType, 0, stream_body(i)));
    ASSERT_TRUE(pump([&] {
        return b.received.size() == 60 && load_relaxed(&b.peer(1).duplicates_dropped) == 60;
    }));
    EXPECT_EQ(stream_from(b, 1), iota_vec(60));
    EXPECT_EQ(load_relaxed(&b.peer(1).msgs_recv), 60u);
    ASSERT_TRUE(pump([&] { return quiescent(); }));
}

TEST_F(EngineTest, PeerRestartFailsRequestsInFlightAndResetsTheSession) {
    make(2);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    // Traffic both ways first, so both sessions have sequence numbers to lose.
    for (uint32_t i = 0; i < 20; i++) {
        ASSERT_TRUE(a.send(2, kStreamType, i, stream_body(i)));
        ASSERT_TRUE(b.send(1, kStreamType, i, stream_body(i)));
    }
    ASSERT_TRUE(pump([&] { return a.received.size() == 20 && b.received.size() == 20; }));
    ASSERT_TRUE(pump([&] { return quiescent(); }));
    // B's LMS stops answering: two RPCs stay in flight, one per lane.
    b.echo_rpcs = false;
    ASSERT_NE(a.start_rpc(2, 1, 1, pattern(32, 1)), 0u);
    ASSERT_NE(a.start_rpc(2, 2, 2, pattern(32, 2), kFlagControlLane), 0u);
    ASSERT_TRUE(pump([&] { return b.received.size() == 22; }));
    EXPECT_TRUE(a.engine().awaiting_replies());
    const uint32_t epoch_before = load_relaxed(&a.shm()->epoch);
    ASSERT_TRUE(pump([&] { return load_relaxed(&a.peer(2).unacked_msgs) == 0; }));
    // And a one-way message B never acknowledges (B's engine stops being polled).
    b.paused = true;
    ASSERT_TRUE(a.send(2, kStreamType, 0, stream_body(99)));
    ASSERT_TRUE(pump([&] { return load_relaxed(&a.peer(2).unacked_msgs) == 1; }));
    // B crashes and comes back with a new incarnation on the same address.
    const uint32_t epoch_at_restart = load_relaxed(&a.shm()->epoch);
    std::string err;
    ASSERT_TRUE(b.restart(5000, &err)) << err;
    b.paused = false;
    b.echo_rpcs = true;
    ASSERT_TRUE(pump([&] { return a.rpc_done(1) && a.rpc_done(2); }));
    EXPECT_EQ(a.rpc_status(1), PGRAC_IC_PEER_RESET);
    EXPECT_EQ(a.rpc_status(2), PGRAC_IC_PEER_RESET);
    EXPECT_FALSE(a.engine().awaiting_replies());
    EXPECT_GE(a.errors(ErrorType::PeerReset), 1u);
    ASSERT_TRUE(pump([&] { return fully_up(); }));
    // The restarted node rejoins in a new epoch (it voted for no earlier view).
    ASSERT_TRUE(pump([&] { return one_view(); }));
    EXPECT_GT(load_relaxed(&a.shm()->epoch), epoch_at_restart);
    EXPECT_EQ(a.peer(2).incarnation, 5000u);
    // The old session's unacked frame was dropped, not resent to the new incarnation.
    EXPECT_EQ(load_relaxed(&a.peer(2).unacked_msgs), 0u);
    EXPECT_EQ(load_relaxed(&a.peer(2).queued_msgs), 0u);
    EXPECT_EQ(load_relaxed(&a.peer(2).queued_bytes), 0u);
    // New sessions from sequence 1 both ways, on both lanes.
    a.net().clear_sent();
    b.received.clear();
    a.received.clear();
    for (uint32_t i = 0; i < 20; i++) {
        ASSERT_TRUE(a.send(2, kStreamType, 0, stream_body(i), i % 2 ? kFlagControlLane : 0));
        ASSERT_TRUE(b.send(1, kStreamType, 0, stream_body(i), i % 2 ? kFlagControlLane : 0));
    }
    ASSERT_TRUE(pump([&] { return a.received.size() == 20 && b.received.size() == 20; }));
    // Odd indices went on the control lane, even ones on the bulk lane: each in order.
    for (const auto& got : {stream_from(b, 1), stream_from(a, 2)}) {
        std::vector<uint32_t> odd, even;
        for (uint32_t i : got) (i % 2 ? odd : even).push_back(i);
        EXPECT_EQ(odd, (std::vector<uint32_t>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19}));
        EXPECT_EQ(even, (std::vector<uint32_t>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18}));
    }
    for (const SentMessage& m : a.net().sent()) EXPECT_LE(m.seq, 10u);
    std::vector<uint8_t> reply;
    EXPECT_EQ(rpc(1, 2, pattern(64, 3), &reply, 3), PGRAC_IC_OK);
    EXPECT_EQ(rpc(2, 1, pattern(64, 4), &reply, 3), PGRAC_IC_OK);
    EXPECT_GT(load_relaxed(&a.shm()->epoch), epoch_before)
        << "DOWN/UP or reset is a membership change";
    ASSERT_TRUE(pump([&] { return quiescent(); }));
}

// The survivor dials every lane of the restarted peer at once, so each Hello
// still carries what it had received from the OLD incarnation on that lane.
// The new incarnation must not take that for an ack of its own frames.
TEST_F(EngineTest, RestartedPeerIgnoresAcksMeantForItsPreviousIncarnation) {
    make(2);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    for (uint32_t i = 0; i < 30; i++) {
        ASSERT_TRUE(b.send(1, kStreamType, 0, stream_body(i)));  // bulk lane
        ASSERT_TRUE(b.send(1, kStreamType, 0, stream_body(i), kFlagControlLane));
    }
    ASSERT_TRUE(pump([&] { return a.received.size() == 60 && quiescent(); }));
    a.net().hold_hello_replies(2);
    std::string err;
    ASSERT_TRUE(b.restart(7000, &err)) << err;
    ASSERT_TRUE(pump([&] { return fully_up() && a.peer(2).incarnation == 7000u; }));
    a.received.clear();
    for (uint32_t i = 0; i < 10; i++) {
        ASSERT_TRUE(b.send(1, kStreamType, 0, stream_body(i)));
        ASSERT_TRUE(b.send(1, kStreamType, 1, stream_body(100 + i), kFlagControlLane));
    }
    EXPECT_TRUE(pump([&] { return a.received.size() == 20; }))
        << "the new incarnation's frames never reached the survivor";
    std::vector<uint32_t> bulk, control;
    for (const Received& r : a.received)
        (r.mh.route_key == 0 ? bulk : control).push_back(stream_index(r));
    EXPECT_EQ(bulk, iota_vec(10));
    EXPECT_EQ(control, (std::vector<uint32_t>{100, 101, 102, 103, 104, 105, 106, 107, 108, 109}));
    std::vector<uint8_t> reply;
    EXPECT_EQ(rpc(1, 2, pattern(64, 1), &reply, 1), PGRAC_IC_OK);
    EXPECT_EQ(rpc(2, 1, pattern(64, 2), &reply, 1), PGRAC_IC_OK);
    EXPECT_TRUE(pump([&] { return quiescent(); }));
}

TEST_F(EngineTest, SilentPeerIsDeclaredDownAndComesBackUp) {
    make(2, [](EngineConfig& c) {
        c.heartbeat_interval_ms = 50;
        c.peer_timeout_ms = 600;
    });
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    const uint32_t epoch_up = load_relaxed(&a.shm()->epoch);
    b.paused = true;  // SIGSTOP
    b.echo_rpcs = false;
    ASSERT_NE(a.start_rpc(2, 1, 1, pattern(64, 1)), 0u);
    const auto stopped = Clock::now();
    ASSERT_TRUE(pump([&] { return a.state_of(2) == PeerState::Down; }));
    const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - stopped);
    EXPECT_GE(took.count(), 300) << "DOWN only after about peer_timeout_ms of silence";
    ASSERT_TRUE(pump([&] { return a.rpc_done(1); }));
    EXPECT_EQ(a.rpc_status(1), PGRAC_IC_UNREACHABLE);
    EXPECT_GE(a.errors(ErrorType::PeerDown), 1u);
    // (lanes_up follows once the transport reports the closed connections)
    EXPECT_TRUE(pump([&] { return load_relaxed(&a.peer(2).lanes_up) == 0; }));
    // DOWN is liveness, not membership: alone, A is no majority of two, so no
    // new view; its lease runs out instead and it fences itself.
    EXPECT_EQ(load_relaxed(&a.shm()->epoch), epoch_up);
    EXPECT_TRUE(pump([&] {
        return load_acquire(&a.shm()->membership.state) ==
               static_cast<uint32_t>(MemberState::Fenced);
    }));
    // A new RPC to a DOWN peer fails at once.
    ASSERT_NE(a.start_rpc(2, 2, 1, pattern(8, 2)), 0u);
    ASSERT_TRUE(pump([&] { return a.rpc_done(2); }, milliseconds(2000)));
    EXPECT_EQ(a.rpc_status(2), PGRAC_IC_UNREACHABLE);
    // SIGCONT: polling resumes and both come back UP.
    const uint32_t epoch_down = load_relaxed(&a.shm()->epoch);
    b.paused = false;
    b.echo_rpcs = true;
    ASSERT_TRUE(pump([&] { return fully_up(); }));
    // A was fenced: it is a member again only in a new epoch.
    ASSERT_TRUE(pump([&] { return one_view(); }));
    EXPECT_GT(load_relaxed(&a.shm()->epoch), epoch_down);
    std::vector<uint8_t> reply;
    EXPECT_EQ(rpc(1, 2, pattern(64, 5), &reply, 3), PGRAC_IC_OK);
    EXPECT_EQ(reply, pattern(64, 5));
    EXPECT_EQ(rpc(2, 1, pattern(64, 6), &reply, 3), PGRAC_IC_OK);
}

TEST_F(EngineTest, LostPeerIsDownAndBothHalvesOfTwoFenceUntilItReturns) {
    make(2, [](EngineConfig& c) {
        c.heartbeat_interval_ms = 50;
        c.peer_timeout_ms = 600;
    });
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    const uint32_t epoch_a = load_relaxed(&a.shm()->epoch);
    const uint32_t epoch_b = load_relaxed(&b.shm()->epoch);
    b.echo_rpcs = false;
    ASSERT_NE(a.start_rpc(2, 1, 1, pattern(64, 1)), 0u);
    ASSERT_TRUE(pump([&] { return b.received.size() == 1; }));
    // The connections break and cannot be made again (the dialer is cut off).
    a.net().refuse_connects = true;
    a.net().kill_all();
    ASSERT_TRUE(pump([&] {
        return a.state_of(2) == PeerState::Connecting && b.state_of(1) == PeerState::Connecting;
    }));
    EXPECT_FALSE(a.rpc_done(1)) << "a lost connection alone fails nothing";
    ASSERT_TRUE(
        pump([&] { return a.state_of(2) == PeerState::Down && b.state_of(1) == PeerState::Down; }));
    ASSERT_TRUE(pump([&] { return a.rpc_done(1); }));
    EXPECT_EQ(a.rpc_status(1), PGRAC_IC_UNREACHABLE);
    // Neither half is a majority of two: no new view, and both fence.
    auto fenced = [](TestNode& n) {
        return load_acquire(&n.shm()->membership.state) ==
               static_cast<uint32_t>(MemberState::Fenced);
    };
    ASSERT_TRUE(pump([&] { return fenced(a) && fenced(b); }));
    EXPECT_EQ(load_relaxed(&a.shm()->epoch), epoch_a);
    EXPECT_EQ(load_relaxed(&b.shm()->epoch), epoch_b);
    EXPECT_GE(a.errors(ErrorType::PeerDown), 1u);
    EXPECT_GE(b.errors(ErrorType::PeerDown), 1u);
    // Reachable again: back UP, and the membership moves once more.
    const uint32_t epoch_down = load_relaxed(&a.shm()->epoch);
    a.net().refuse_connects = false;
    b.echo_rpcs = true;
    ASSERT_TRUE(pump([&] { return fully_up(); }));
    ASSERT_TRUE(pump([&] { return one_view(); }));
    EXPECT_GT(load_relaxed(&a.shm()->epoch), epoch_down);
    std::vector<uint8_t> reply;
    EXPECT_EQ(rpc(1, 2, pattern(64, 2), &reply, 2), PGRAC_IC_OK);
}

TEST_F(EngineTest, ReconnectWithinTheTimeoutIsNotAMembershipChange) {
    make(2);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    const uint32_t epoch_a = load_relaxed(&a.shm()->epoch);
    const uint32_t epoch_b = load_relaxed(&b.shm()->epoch);
    for (int round = 0; round < 3; round++) {
        const uint64_t before = load_relaxed(&a.peer(2).reconnects);
        (round % 2 ? b : a).net().kill_all();
        ASSERT_TRUE(
            pump([&] { return load_relaxed(&a.peer(2).reconnects) >= before + 2 && fully_up(); }));
    }
    EXPECT_EQ(load_relaxed(&a.shm()->epoch), epoch_a);
    EXPECT_EQ(load_relaxed(&b.shm()->epoch), epoch_b);
    std::vector<uint8_t> reply;
    EXPECT_EQ(rpc(1, 2, pattern(64, 2), &reply, 2), PGRAC_IC_OK);
}

// ---- refusals

struct RefusalCase {
    const char* name;
    ErrorType expected;
    std::function<void(uint16_t node, EngineConfig&)> tweak;
};

class EngineRefusal : public EngineTest, public ::testing::WithParamInterface<RefusalCase> {};

TEST_P(EngineRefusal, IsRecordedAndNeverUp) {
    const RefusalCase& rc = GetParam();
    make(2, [&](EngineConfig& c) {
        c.heartbeat_interval_ms = 20;  // redial quickly
        rc.tweak(c.identity.node_id, c);
    });
    TestNode& a = node(1);
    TestNode& b = node(2);
    auto never_up = [&] {
        return a.state_of(2) != PeerState::Up && b.state_of(1) != PeerState::Up &&
               load_relaxed(&a.peer(2).lanes_up) == 0 && load_relaxed(&b.peer(1).lanes_up) == 0;
    };
    bool ok = true;
    ASSERT_TRUE(pump([&] {
        ok = ok && never_up();
        return !ok || a.errors(rc.expected) + b.errors(rc.expected) >= 2;
    }));
    ASSERT_TRUE(ok) << "came up despite " << rc.name;
    // Keep going for a while: retries are refused the same way.
    EXPECT_TRUE(pump_for(all(), milliseconds(500), never_up));
    EXPECT_EQ(load_relaxed(&a.peer(2).msgs_recv) + load_relaxed(&b.peer(1).msgs_recv), 0u);
    EXPECT_NE(a.state_of(2), PeerState::Up);
    // The dialer marks the peer ERROR; an RPC to it fails rather than hanging.
    EXPECT_EQ(a.state_of(2), PeerState::Error);
    ASSERT_NE(a.start_rpc(2, 1, 1, pattern(8, 1)), 0u);
    ASSERT_TRUE(pump([&] { return a.rpc_done(1); }));
    EXPECT_EQ(a.rpc_status(1), PGRAC_IC_UNREACHABLE);
}

INSTANTIATE_TEST_SUITE_P(
    Engine, EngineRefusal,
    ::testing::Values(RefusalCase{"WrongKey", ErrorType::WrongKey,
                                  [](uint16_t n, EngineConfig& c) {
                                      if (n == 2) {
                                          const std::string k = "another-key-entirely-0123456789";
                                          c.identity.key.assign(k.begin(), k.end());
                                      }
                                  }},
                      RefusalCase{"UnknownNode", ErrorType::UnknownNode,
                                  [](uint16_t n, EngineConfig& c) {
                                      // B does not list node 1 (it lists a node 3 nobody runs).
                                      if (n == 2) c.nodes[0].node_id = 3;
                                  }},
                      RefusalCase{"ClusterMismatch", ErrorType::ClusterMismatch,
                                  [](uint16_t n, EngineConfig& c) {
                                      if (n == 2) c.identity.cluster_name = "othercluster";
                                  }},
                      RefusalCase{"SystemMismatch", ErrorType::SystemMismatch,
                                  [](uint16_t n, EngineConfig& c) {
                                      if (n == 2) c.identity.system_id = kSystemId + 1;
                                  }},
                      RefusalCase{"AddressMismatch", ErrorType::AddressMismatch,
                                  [](uint16_t n, EngineConfig& c) {
                                      // A listens on 127.0.0.2 but dials from 127.0.0.1.
                                      c.nodes[0].host = "127.0.0.2";
                                      (void)n;
                                  }}),
    [](const ::testing::TestParamInfo<RefusalCase>& info) { return info.param.name; });

// ---- hostile bytes

TEST_F(EngineTest, GarbageOnTheListeningPortIsCountedAndHarmless) {
    make(2);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    // 1: not a frame at all.
    int fd = raw_connect(addrs_[1].port);
    ASSERT_GE(fd, 0);
    const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\nthis is not a pgrac frame";
    ASSERT_EQ(write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
    ASSERT_TRUE(pump([&] { return b.errors(ErrorType::MalformedFrame) >= 1; }));
    close(fd);
    // 2: a well-formed Message frame before any handshake.
    fd = raw_connect(addrs_[1].port);
    ASSERT_GE(fd, 0);
    std::vector<uint8_t> payload(kMessageHeaderSize + 8, 0);
    MessageHeader mh;
    mh.msg_type = 300;
    encode_message_header(mh, payload.data());
    FrameHeader h;
    h.type = FrameType::Message;
    h.src_node = 1;
    h.seq = 1;
    h.payload_len = static_cast<uint32_t>(payload.size());
    std::vector<uint8_t> frame(kFrameHeaderSize);
    encode_frame_header(h, payload.data(), frame.data());
    frame.insert(frame.end(), payload.begin(), payload.end());
    ASSERT_EQ(write(fd, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
    ASSERT_TRUE(pump([&] { return b.errors(ErrorType::HandshakeFailed) >= 1; }));
    close(fd);
    // 3: a header announcing a payload larger than any frame may carry.
    fd = raw_connect(addrs_[0].port);
    ASSERT_GE(fd, 0);
    FrameHeader big;
    big.type = FrameType::Hello;
    uint8_t hdr[kFrameHeaderSize];
    encode_frame_header(big, nullptr, hdr);
    const uint32_t huge = 64u << 20;
    std::memcpy(hdr + 8, &huge, 4);
    ASSERT_EQ(write(fd, hdr, sizeof hdr), static_cast<ssize_t>(sizeof hdr));
    ASSERT_TRUE(pump([&] { return a.errors(ErrorType::OversizedMessage) >= 1; }));
    close(fd);
    // 4: a connection that says nothing, then hangs up: no error, no harm.
    fd = raw_connect(addrs_[0].port);
    ASSERT_GE(fd, 0);
    close(fd);
    // The cluster never noticed.
    EXPECT_TRUE(fully_up());
    EXPECT_EQ(load_relaxed(&a.peer(2).reconnects), 0u);
    std::vector<uint8_t> reply;
    EXPECT_EQ(rpc(1, 2, pattern(512, 1), &reply), PGRAC_IC_OK);
    EXPECT_EQ(reply, pattern(512, 1));
    EXPECT_EQ(rpc(2, 1, pattern(512, 2), &reply), PGRAC_IC_OK);
    EXPECT_EQ(a.errors(ErrorType::MalformedFrame) + a.errors(ErrorType::HandshakeFailed), 0u);
}

// ---- backpressure toward the LMS workers

TEST_F(EngineTest, FullInboxHoldsMessagesAndDeliversThemWhenItDrains) {
    SharedSizing tiny = small_sizing();
    tiny.inbox_ring_bytes = 4096;  // the smallest ring: about a dozen records of 300 bytes
    make(2, {}, tiny);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    b.serve = false;  // LMS workers busy elsewhere
    constexpr uint32_t kN = 300;
    for (uint32_t i = 0; i < kN; i++) ASSERT_TRUE(a.send(2, kStreamType, 6, stream_body(i, 250)));
    // Everything reaches B's listener (and is acked) though the inbox holds a few.
    ASSERT_TRUE(pump([&] {
        return load_relaxed(&b.peer(1).msgs_recv) == kN &&
               load_relaxed(&a.peer(2).unacked_msgs) == 0;
    }));
    EXPECT_GE(b.errors(ErrorType::InboxFull), 1u);
    ShmRing inbox = inbox_ring(b.shm(), 6 % b.shm()->n_lms);
    EXPECT_LT(inbox.pushed(), kN) << "most messages are held by the listener";
    EXPECT_GE(inbox.full_count(), 1u);
    EXPECT_EQ(b.engine().next_timeout_ms(), 1) << "a held backlog keeps the listener ticking";
    std::vector<uint8_t> reply;
    b.serve = true;
    ASSERT_TRUE(pump([&] { return stream_from(b, 1).size() == kN; }));
    EXPECT_EQ(stream_from(b, 1), iota_vec(kN)) << "nothing lost, nothing doubled, in order";
    EXPECT_EQ(inbox.pushed(), kN);
    EXPECT_EQ(rpc(1, 2, pattern(100, 1), &reply), PGRAC_IC_OK);
    EXPECT_EQ(reply, pattern(100, 1));
}

TEST_F(EngineTest, UnknownDestinationFailsTheRpc) {
    make(2);
    bring_up();
    TestNode& a = node(1);
    ASSERT_NE(a.start_rpc(9, 4, 1, pattern(16, 1)), 0u);
    ASSERT_TRUE(pump([&] { return a.rpc_done(4); }));
    EXPECT_EQ(a.rpc_status(4), PGRAC_IC_UNKNOWN_NODE);
    EXPECT_GE(a.errors(ErrorType::UnknownNode), 1u);
    EXPECT_FALSE(a.engine().awaiting_replies());
    ASSERT_FALSE(a.host().woken_procs.empty());
    EXPECT_EQ(a.host().woken_procs.back(), 4u);
    // One-way messages to it are dropped with the same error; nothing else suffers.
    ASSERT_TRUE(a.send(9, kStreamType, 0, stream_body(0)));
    ASSERT_TRUE(pump([&] { return a.errors(ErrorType::UnknownNode) >= 2; }));
    EXPECT_TRUE(fully_up());
    std::vector<uint8_t> reply;
    EXPECT_EQ(rpc(1, 2, pattern(16, 2), &reply), PGRAC_IC_OK);
}

// Under crc and mac the kept request is rewritten where it is; under secure
// (over TCP) it was sealed where it is kept, and is opened in place first.
class EngineProtectionTest : public EngineTest,
                             public ::testing::WithParamInterface<WireProtection> {};

TEST_P(EngineProtectionTest, AnRpcToldItFailedNeverRunsAfterTheReconnect) {
    make(2, [](EngineConfig& c) {
        c.identity.protection = GetParam();
        c.rekey_interval = 64;
        c.heartbeat_interval_ms = 50;
        c.peer_timeout_ms = 600;
    });
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    const size_t before = b.received.size();
    // The request is lost on the wire (the session keeps it for a resend)...
    a.net().drop_next_messages(1);
    ASSERT_NE(a.start_rpc(2, 6, 1, pattern(40, 7)), 0u);
    // ...and the peer falls silent: DOWN, and the caller is told it failed.
    b.paused = true;
    ASSERT_TRUE(pump([&] { return a.rpc_done(6); }));
    EXPECT_EQ(a.rpc_status(6), PGRAC_IC_UNREACHABLE);
    b.paused = false;
    ASSERT_TRUE(pump([&] { return fully_up(); }));
    // The resent frame was voided: the session stays in order, nothing runs.
    std::vector<uint8_t> reply;
    EXPECT_EQ(rpc(1, 2, pattern(16, 8), &reply, 7), PGRAC_IC_OK);
    EXPECT_EQ(b.received.size(), before + 1) << "only the second RPC reached node 2";
    EXPECT_GE(load_relaxed(&a.peer(2).requests_voided), 1u);
    EXPECT_EQ(b.errors(ErrorType::FrameAuthFailed), 0u);
}

INSTANTIATE_TEST_SUITE_P(Modes, EngineProtectionTest,
                         ::testing::Values(WireProtection::Crc, WireProtection::Mac,
                                           WireProtection::Secure),
                         [](const auto& info) { return wire_protection_name(info.param); });

TEST_F(EngineTest, ReplyOnlyFromTheNodeAsked) {
    make(3);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    TestNode& c = node(3);
    b.echo_rpcs = false;
    const uint64_t id = a.start_rpc(2, 5, 1, pattern(16, 1));
    ASSERT_NE(id, 0u);
    ASSERT_TRUE(pump([&] { return b.received.size() == 1; }));
    // Node 3 answers an RPC that went to node 2: refused, counted, the RPC waits on.
    MessageHeader mh;
    mh.msg_type = 300;
    mh.rpc_id = id;
    const std::vector<uint8_t> forged = pattern(16, 9);
    ASSERT_TRUE(c.push(1, kFlagRpcReply, mh, forged.data(), 16));
    ASSERT_TRUE(pump([&] { return a.errors(ErrorType::WrongSource) >= 1; }));
    EXPECT_FALSE(a.rpc_done(5));
    // So does node 2 for an rpc_id nobody waits for.
    mh.rpc_id = id + 1;
    ASSERT_TRUE(b.push(1, kFlagRpcReply, mh, forged.data(), 16));
    ASSERT_TRUE(pump([&] { return a.errors(ErrorType::WrongSource) >= 2; }));
    EXPECT_FALSE(a.rpc_done(5));
    // The real answer from node 2 completes it.
    mh.rpc_id = id;
    const std::vector<uint8_t> real = pattern(16, 1);
    ASSERT_TRUE(b.push(1, kFlagRpcReply, mh, real.data(), 16));
    ASSERT_TRUE(pump([&] { return a.rpc_done(5); }));
    EXPECT_EQ(a.rpc_status(5), PGRAC_IC_OK);
    EXPECT_EQ(a.rpc_reply(5), real);
}

// ---- under netem (tests/netns/netem_test.sh): one engine per network namespace

// Reads PGRAC_NETEM_NODE (1 or 2), PGRAC_NETEM_ADDR1, PGRAC_NETEM_ADDR2,
// PGRAC_NETEM_PORT. Node 1 streams messages (and RPCs) to node 2 while killing
// its connections now and then; node 2 checks exactly-once, in-order delivery
// and tells node 1 the verdict in the reply to a final RPC.
TEST(EngineNetem, StreamIsExactlyOnceAndInOrderUnderLossAndDelay) {
    const char* me = std::getenv("PGRAC_NETEM_NODE");
    const char* a1 = std::getenv("PGRAC_NETEM_ADDR1");
    const char* a2 = std::getenv("PGRAC_NETEM_ADDR2");
    const char* port = std::getenv("PGRAC_NETEM_PORT");
    if (me == nullptr || a1 == nullptr || a2 == nullptr || port == nullptr)
        GTEST_SKIP() << "set PGRAC_NETEM_NODE/ADDR1/ADDR2/PORT (tests/netns/netem_test.sh)";
    const uint16_t id = static_cast<uint16_t>(std::atoi(me));
    ASSERT_TRUE(id == 1 || id == 2);
    const uint16_t p = static_cast<uint16_t>(std::atoi(port));
    std::vector<NodeAddress> nodes = {{1, a1, p}, {2, a2, p}};
    EngineConfig cfg = make_config(id, nodes);
    cfg.heartbeat_interval_ms = 100;
    cfg.peer_timeout_ms = 20000;
    TestNode n(cfg);
    std::string err;
    ASSERT_TRUE(n.start(&err)) << err;
    const uint16_t other = id == 1 ? 2 : 1;
    constexpr uint32_t kN = 5000;
    constexpr uint16_t kDoneType = 302;
    const milliseconds limit(90000);
    auto up = [&] { return n.state_of(other) == PeerState::Up; };
    ASSERT_TRUE(pump_until({&n}, up, milliseconds(20000))) << "peer never came up";
    if (id == 1) {
        uint32_t pushed = 0, rpcs = 0;
        uint32_t slot_busy = 0;
        int kills = 0;
        ASSERT_TRUE(pump_until(
            {&n},
            [&] {
                if (pushed > 0 && pushed % 1000 == 0 && kills < static_cast<int>(pushed / 1000)) {
                    kills++;
                    if (kills % 2)
                        n.net().kill_all();
                    else
                        n.net().drop_next_messages(2, true);
                }
                for (int k = 0; k < 25 && pushed < kN; k++, pushed++)
                    if (!n.send(2, kStreamType, pushed % 3, stream_body(pushed, pushed % 1000),
                                pushed % 7 == 0 ? kFlagControlLane : 0))
                        return false;
                if (slot_busy == 0 || n.rpc_done(1)) {
                    if (slot_busy != 0) {
                        EXPECT_TRUE(n.rpc_status(1) == PGRAC_IC_OK) << n.rpc_status(1);
                        rpcs++;
                    }
                    slot_busy = 1;
                    n.start_rpc(2, 1, rpcs, pattern(100 + rpcs % 5000, rpcs));
                }
                return pushed == kN && rpcs >= 50;
            },
            limit))
            << "pushed " << pushed << ", rpcs " << rpcs << ", slot state "
            << load_acquire(&reply_slot(n.shm(), 1)->state) << ", unacked "
            << load_relaxed(&n.peer(2).unacked_msgs) << ", state "
            << static_cast<int>(n.state_of(2)) << [&] {
                   std::string out;
                   const auto& logs = n.host().logs;
                   for (size_t i = logs.size() > 40 ? logs.size() - 40 : 0; i < logs.size(); i++)
                       out += "\n  log: " + logs[i].second;
                   return out;
               }();
        ASSERT_TRUE(pump_until(
            {&n}, [&] { return n.rpc_done(1); }, limit));
        // The verdict.
        MessageHeader mh;
        ReplySlot* slot = reply_slot(n.shm(), 2);
        slot->generation++;
        const uint64_t rpc_id = make_rpc_id(2, slot->generation);
        store_release(&slot->rpc_id, rpc_id);
        store_release(&slot->state, static_cast<uint32_t>(SlotState::Waiting));
        mh.msg_type = kDoneType;
        mh.rpc_id = rpc_id;
        ASSERT_TRUE(n.push(2, kFlagRpcRequest, mh, nullptr, 0));
        ASSERT_TRUE(pump_until(
            {&n}, [&] { return n.rpc_done(2); }, limit));
        ASSERT_EQ(n.rpc_status(2), PGRAC_IC_OK);
        const auto verdict = n.rpc_reply(2);
        const std::string text(verdict.begin(), verdict.end());
        EXPECT_EQ(text, "ok " + std::to_string(kN)) << text;
        EXPECT_GE(load_relaxed(&n.peer(2).reconnects), 2u);
        EXPECT_GE(load_relaxed(&n.peer(2).retransmits), 2u);
        // Let the verdict's ack reach node 2 before going away.
        pump_until(
            {&n}, [&] { return false; }, milliseconds(500));
        n.engine().shutdown();
    } else {
        n.no_echo_types.insert(kDoneType);
        bool answered = false;
        Clock::time_point done_seen{};
        ASSERT_TRUE(pump_until(
            {&n},
            [&] {
                for (const Received& r : n.received) {
                    if (r.mh.msg_type != kDoneType || answered) continue;
                    // Lanes are not ordered with each other: the control lane
                    // may still be catching up after a reconnect. Give it time.
                    if (done_seen == Clock::time_point{}) done_seen = Clock::now();
                    std::vector<uint32_t> want = iota_vec(kN), got = stream_from(n, 1);
                    if (got.size() < kN && Clock::now() - done_seen < milliseconds(30000))
                        return false;
                    // Order holds per (lane, route key): control-lane messages
                    // (i % 7 == 0) and bulk ones, each split by route key i % 3
                    // (the key also picks the LMS inbox the test drains).
                    auto group = [](uint32_t i) { return (i % 7 == 0 ? 10u : 0u) + i % 3; };
                    std::map<uint32_t, std::vector<uint32_t>> by_key_got, by_key_want;
                    for (uint32_t i : got) by_key_got[group(i)].push_back(i);
                    for (uint32_t i : want) by_key_want[group(i)].push_back(i);
                    std::string v = "ok " + std::to_string(got.size());
                    for (auto& [g, w] : by_key_want) {
                        const auto& have = by_key_got[g];
                        size_t k = 0;
                        while (k < w.size() && k < have.size() && w[k] == have[k]) k++;
                        if (k == w.size() && have.size() == w.size()) continue;
                        v = "bad: got " + std::to_string(got.size()) + " messages; group " +
                            std::to_string(g) + " differs at " + std::to_string(k) + ": want " +
                            (k < w.size() ? std::to_string(w[k]) : "end") + ", got " +
                            (k < have.size() ? std::to_string(have[k]) : "end");
                        break;
                    }
                    MessageHeader rh = r.mh;
                    rh.status = PGRAC_IC_OK;
                    n.push(1, kFlagRpcReply, rh, v.data(), static_cast<uint32_t>(v.size()));
                    answered = true;
                }
                return answered;
            },
            limit))
            << "received " << stream_from(n, 1).size() << [&] {
                   std::string out;
                   const auto& logs = n.host().logs;
                   for (size_t i = logs.size() > 40 ? logs.size() - 40 : 0; i < logs.size(); i++)
                       out += "\n  log: " + logs[i].second;
                   return out;
               }();
        // Stay until the verdict is acked and node 1 has gone (or a bound).
        pump_until(
            {&n},
            [&] {
                return load_relaxed(&n.peer(1).unacked_msgs) == 0 &&
                       load_relaxed(&n.peer(1).lanes_up) == 0;
            },
            milliseconds(20000));
        std::vector<uint32_t> got = stream_from(n, 1);
        EXPECT_EQ(got.size(), kN);
        EXPECT_GE(load_relaxed(&n.peer(1).msgs_recv), kN + 50u);
    }
}

}  // namespace
}  // namespace pgrac::ic::enginetest
