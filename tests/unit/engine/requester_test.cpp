// Requester lanes: a process's own connection to a peer's listener. Its
// requests are served (in place or by an LMS worker) and answered on it; a
// stale request never runs after a newer one of the same process; frames other
// than requests are refused, and so are lanes of a node that is not UP, over
// the limit or of another instance (counted as busy or duplicate_node); a
// reply that is not the call's fails it. Each case runs with both kinds of
// lane: a TCP socket (RequesterLane) and a transport of the lane's own
// (TransportRequesterLane, here over the TCP transport; the verbs tiers run it
// over a queue pair, t/029 in the soft-RoCE VM).
#include <atomic>
#include <unistd.h>
#include <thread>

#include "engine/fixture.hpp"
#include "ic/engine/requester_lane.hpp"
#include "ic/engine/transport_lane.hpp"
#include "tiers/transports.hpp"

namespace pgrac::ic::enginetest {
namespace {

constexpr uint16_t kRpcType = 300;

uint64_t now_ns() {
    return lane_now_ns();
}

std::vector<uint8_t> request(uint64_t rpc_id, const std::vector<uint8_t>& body,
                             uint16_t type = kRpcType) {
    return rpc_request(rpc_id, body, type);
}

void serve_rpcs_in_place(EngineConfig& c) {
    c.serve_in_place.assign(PGRAC_IC_MAX_MSG_TYPE + 1, false);
    c.serve_in_place[kRpcType] = true;
}

class RequesterTest : public EngineTest {
  protected:
    using Result = RequesterLaneBase::Result;

    // Runs f on a thread of its own (the lane blocks) while the engines run.
    template <typename F>
    void with_engines(F f) {
        std::atomic<bool> done{false};
        std::thread t([&] {
            f();
            done = true;
        });
        pump([&] { return done.load(); }, std::chrono::milliseconds(20000));
        t.join();
    }
    // Two nodes up (node 2 serving kRpcType in place unless told otherwise),
    // and node 1's lane to node 2 opened.
    std::unique_ptr<RequesterLaneBase> up_with_lane(bool in_place = true) {
        if (in_place)
            make(2, serve_rpcs_in_place);
        else
            make(2);
        bring_up();
        auto lane = lane_to(1, 2);
        std::string err;
        EXPECT_EQ(open(*lane, &err), Result::Ok) << err;
        return lane;
    }
    // tweak may change the requester's identity (a wrong key, another instance).
    std::unique_ptr<RequesterLaneBase> lane_to(
        uint16_t from, uint16_t to, const std::function<void(LocalIdentity&)>& tweak = {}) {
        EngineConfig c = make_config(from, addrs_);
        if (tweak) tweak(c.identity);
        const NodeAddress& a = addrs_[to - 1];
        if (!over_transport_)
            return std::make_unique<RequesterLane>(c.identity, to, a.host, a.port);
        return std::make_unique<TransportRequesterLane>(
            c.identity, to, a.host, a.port,
            [](ic::TransportHandler& h, std::string*) -> std::unique_ptr<ic::Transport> {
                tiers::TcpOptions o;
                o.initial_max_payload = kMaxHandshakePayload;
                return tiers::make_tcp_transport(h, o);
            });
    }
    Result open(RequesterLaneBase& l, std::string* err) {
        Result r = Result::Failed;
        with_engines([&] { r = l.open(now_ns() + 5000000000ull, nullptr, err); });
        return r;
    }
    Result call(RequesterLaneBase& l, uint64_t rpc_id, const std::vector<uint8_t>& body,
                std::vector<uint8_t>* reply, bool* sent, std::string* err,
                uint64_t timeout_ns = 5000000000ull) {
        Result r = Result::Failed;
        const auto req = request(rpc_id, body);
        with_engines([&] {
            r = l.call(req.data(), static_cast<uint32_t>(req.size()), 0, rpc_id, 0,
                       now_ns() + timeout_ns, nullptr, reply, sent, err);
        });
        return r;
    }

    bool over_transport_ = false;
};

// The cases that hold for both kinds of lane: false = a TCP socket of the
// lane's own, true = a transport of its own.
class LaneKinds : public RequesterTest, public ::testing::WithParamInterface<bool> {
  protected:
    void SetUp() override { over_transport_ = GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Lanes, LaneKinds, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                             return i.param ? std::string("Transport") : std::string("Socket");
                         });

TEST_P(LaneKinds, RequestsAreServedInPlaceAndAnsweredOnTheLane) {
    auto lane = up_with_lane();
    TestNode& b = node(2);
    std::string err;
    EXPECT_EQ(load_relaxed(&b.peer(1).requester_lanes), 1u);
    for (uint32_t i = 1; i <= 20; i++) {
        const auto body = pattern(64 + 400 * i, i);
        std::vector<uint8_t> reply;
        bool sent = false;
        ASSERT_EQ(call(*lane, make_rpc_id(3, i), body, &reply, &sent, &err), Result::Ok) << err;
        ASSERT_GE(reply.size(), kMessageHeaderSize);
        EXPECT_EQ(std::vector<uint8_t>(reply.begin() + kMessageHeaderSize, reply.end()), body);
    }
    EXPECT_EQ(b.served_in_place.size(), 20u);
    EXPECT_EQ(load_relaxed(&b.peer(1).direct_rpcs_served), 20u);
    EXPECT_EQ(load_relaxed(&b.peer(1).rpcs_served), 20u);
    // The replies gave back the send budget they took.
    EXPECT_TRUE(pump([&] { return load_relaxed(&b.peer(1).queued_msgs) == 0; }));
    lane->close();
    EXPECT_TRUE(pump([&] { return load_relaxed(&b.peer(1).requester_lanes) == 0; }));
}

TEST_P(LaneKinds, RequestsAnLmsWorkerServesAreAnsweredOnTheLane) {
    auto lane = up_with_lane(false);
    std::string err;
    std::vector<uint8_t> reply;
    bool sent = false;
    const auto body = pattern(8192, 9);
    ASSERT_EQ(call(*lane, make_rpc_id(4, 1), body, &reply, &sent, &err), Result::Ok) << err;
    EXPECT_EQ(std::vector<uint8_t>(reply.begin() + kMessageHeaderSize, reply.end()), body);
    EXPECT_EQ(node(2).received.size(), 1u) << "an LMS worker took it";
}

// A reply sealed while it is written (Engine::begin_sealed_reply, the block
// service's path under secure): in pieces, it reaches the lane as the same
// bytes; one begun and abandoned first leaves the frame counters in step (the
// next frame opens), and under crc none is sealed that way.
class SealedReplies : public RequesterTest,
                      public ::testing::WithParamInterface<std::tuple<bool, WireProtection>> {
  protected:
    void SetUp() override { over_transport_ = std::get<0>(GetParam()); }
    WireProtection protection() const { return std::get<1>(GetParam()); }
    std::unique_ptr<RequesterLaneBase> up() {
        const WireProtection prot = protection();
        make(2, [prot](EngineConfig& c) {
            serve_rpcs_in_place(c);
            c.identity.protection = prot;
        });
        bring_up();
        auto lane = lane_to(1, 2, [prot](LocalIdentity& id) { id.protection = prot; });
        std::string err;
        EXPECT_EQ(open(*lane, &err), Result::Ok) << err;
        node(2).seal_replies = true;
        return lane;
    }
    void calls(RequesterLaneBase& lane, uint32_t first, uint32_t n) {
        std::string err;
        for (uint32_t i = first; i < first + n; i++) {
            // 0, 1, 7 and 8 bytes (cut short of the pieces), then past them.
            const uint32_t sizes[] = {0, 1, 7, 8, 1009, 8204 * 2 + 8, 65000};
            const auto body = pattern(sizes[i % 7], i);
            std::vector<uint8_t> reply;
            bool sent = false;
            ASSERT_EQ(call(lane, make_rpc_id(3, i), body, &reply, &sent, &err), Result::Ok) << err;
            ASSERT_GE(reply.size(), kMessageHeaderSize);
            MessageHeader mh;
            decode_message_header(reply.data(), static_cast<uint32_t>(reply.size()), &mh);
            EXPECT_EQ(mh.rpc_id, make_rpc_id(3, i));
            EXPECT_EQ(std::vector<uint8_t>(reply.begin() + kMessageHeaderSize, reply.end()), body);
        }
    }
};

INSTANTIATE_TEST_SUITE_P(Lanes, SealedReplies,
                         ::testing::Combine(::testing::Values(false, true),
                                            ::testing::Values(WireProtection::Crc,
                                                              WireProtection::Secure)),
                         [](const auto& i) {
                             return std::string(std::get<0>(i.param) ? "Transport_" : "Socket_") +
                                    wire_protection_name(std::get<1>(i.param));
                         });

TEST_P(SealedReplies, ReachTheLaneAsTheSameBytes) {
    auto lane = up();
    TestNode& b = node(2);
    calls(*lane, 1, 14);
    const uint64_t sealed = protection() == WireProtection::Secure ? 14 : 0;
    EXPECT_EQ(b.sealed_begun, sealed);
    EXPECT_EQ(load_relaxed(&b.peer(1).sealed_in_place), sealed);
    EXPECT_EQ(b.served_in_place.size(), 14u);
    EXPECT_EQ(load_relaxed(&b.peer(1).direct_rpcs_served), 14u);
}

TEST_P(SealedReplies, OneAbandonedLeavesTheNextFrameInStep) {
    auto lane = up();
    TestNode& b = node(2);
    b.abandon_first = true;
    calls(*lane, 1, 7);
    b.abandon_first = false;
    calls(*lane, 8, 7);
    const uint64_t sealed = protection() == WireProtection::Secure ? 14 : 0;
    EXPECT_EQ(load_relaxed(&b.peer(1).sealed_in_place), sealed);
    EXPECT_EQ(load_relaxed(&b.peer(1).requester_lanes), 1u) << "the lane stayed up";
}

TEST_P(LaneKinds, ALaneThePeerClosedBetweenRpcsSendsNothingOnIt) {
    auto lane = up_with_lane();
    std::string err;
    std::vector<uint8_t> reply;
    bool sent = false;
    ASSERT_EQ(call(*lane, make_rpc_id(6, 1), pattern(16, 1), &reply, &sent, &err), Result::Ok)
        << err;
    // Node 2's listener crashes and comes back: the lane's connection is gone.
    ASSERT_TRUE(node(2).restart(5555, &err)) << err;
    const size_t served = node(2).served_in_place.size();
    pump([] { return false; }, std::chrono::milliseconds(200));  // the close reaches the lane
    EXPECT_EQ(call(*lane, make_rpc_id(6, 2), pattern(16, 2), &reply, &sent, &err), Result::Failed);
    EXPECT_FALSE(sent) << "nothing is written on a lane the peer closed";
    EXPECT_NE(err.find("closed the lane"), std::string::npos) << err;
    EXPECT_FALSE(lane->is_open());
    EXPECT_EQ(node(2).served_in_place.size(), served);
}

TEST_P(LaneKinds, AStaleRequestNeverRunsAfterANewerOneOfItsProcess) {
    make(2, serve_rpcs_in_place);
    bring_up();
    TestNode& b = node(2);
    // The newer request (generation 1 of slot 3) over the peer lanes...
    std::vector<uint8_t> reply;
    ASSERT_EQ(rpc(1, 2, pattern(64, 1), &reply, 3), PGRAC_IC_OK);
    // ... then an older one of the same slot on a requester lane: voided.
    auto lane = lane_to(1, 2);
    std::string err;
    ASSERT_EQ(open(*lane, &err), Result::Ok) << err;
    const uint64_t voided_before = load_relaxed(&b.peer(1).requests_voided);
    bool sent = false;
    EXPECT_EQ(call(*lane, make_rpc_id(3, 0), pattern(64, 2), &reply, &sent, &err, 300000000ull),
              Result::Timeout);
    EXPECT_TRUE(sent);
    EXPECT_EQ(load_relaxed(&b.peer(1).requests_voided), voided_before + 1);
    EXPECT_EQ(b.served_in_place.size(), 1u) << "only the newer request ran";
}

TEST_P(LaneKinds, AFrameThatIsNotARequestDropsTheLane) {
    auto lane = up_with_lane();
    TestNode& b = node(2);
    std::string err;
    const uint64_t malformed = b.errors(ErrorType::MalformedFrame);
    // A reply-flagged frame where only requests may come.
    std::vector<uint8_t> reply;
    bool sent = false;
    RequesterLane::Result r = Result::Ok;
    const auto req = request(make_rpc_id(5, 1), pattern(32, 3));
    with_engines([&] {
        r = lane->call(req.data(), static_cast<uint32_t>(req.size()), kFlagRpcReply,
                       make_rpc_id(5, 1), 0, now_ns() + 2000000000ull, nullptr, &reply, &sent,
                       &err);
    });
    EXPECT_NE(r, Result::Ok);
    EXPECT_FALSE(lane->is_open());
    EXPECT_TRUE(pump([&] { return b.errors(ErrorType::MalformedFrame) > malformed; }));
    EXPECT_EQ(b.served_in_place.size(), 0u);
    EXPECT_EQ(b.state_of(1), PeerState::Up) << "the peer lanes are untouched";
}

TEST_P(LaneKinds, AWrongKeyIsRefused) {
    make(2, serve_rpcs_in_place);
    bring_up();
    auto lane = lane_to(1, 2, [](LocalIdentity& id) { id.key.assign(40, 'x'); });
    std::string err;
    EXPECT_EQ(open(*lane, &err), Result::Failed);
    EXPECT_FALSE(lane->is_open());
    EXPECT_EQ(load_relaxed(&node(2).peer(1).requester_lanes), 0u);
}

TEST_P(LaneKinds, ALaneFromAnotherIncarnationIsRefusedBeforeAnythingIsSent) {
    make(2, serve_rpcs_in_place);
    bring_up();
    // not the instance node 2 knows
    auto lane = lane_to(1, 2, [](LocalIdentity& id) { id.incarnation = 777; });
    TestNode& b = node(2);
    const uint64_t duplicates = b.errors(ErrorType::DuplicateNode);
    const uint64_t busy = b.errors(ErrorType::Busy);
    std::string err;
    EXPECT_EQ(open(*lane, &err), Result::Failed);
    EXPECT_NE(err.find("duplicate_node"), std::string::npos) << err;
    EXPECT_FALSE(lane->is_open());
    EXPECT_EQ(load_relaxed(&b.peer(1).requester_lanes), 0u);
    // Counted where it was refused, as what it was.
    EXPECT_TRUE(pump([&] { return b.errors(ErrorType::DuplicateNode) == duplicates + 1; }))
        << b.errors(ErrorType::DuplicateNode) - duplicates;
    EXPECT_EQ(b.errors(ErrorType::Busy), busy);
    EXPECT_TRUE(b.host().logged("refused requester lane"));
}

TEST_P(LaneKinds, ALaneFromANodeThatIsNotUpIsRefusedAsBusy) {
    make(2, serve_rpcs_in_place);
    node(1).paused = true;  // never dials node 2: DOWN there
    auto lane = lane_to(1, 2);
    TestNode& b = node(2);
    std::string err;
    EXPECT_EQ(open(*lane, &err), Result::Failed);
    EXPECT_NE(err.find("busy"), std::string::npos) << err;
    EXPECT_FALSE(lane->is_open());
    EXPECT_EQ(b.state_of(1), PeerState::Down);
    EXPECT_TRUE(pump([&] { return b.errors(ErrorType::Busy) == 1; })) << b.errors(ErrorType::Busy);
    EXPECT_EQ(b.errors(ErrorType::UnauthenticatedLimit), 0u) << "busy is not that";
    EXPECT_EQ(b.errors(ErrorType::DuplicateNode), 0u);
    EXPECT_EQ(b.errors(ErrorType::HandshakeFailed), 0u);
}

// 512 per node (Engine::kMaxRequesterLanes); the next one is refused as busy
// (and counted so, not as unauthenticated_limit, which is another limit).
TEST_F(RequesterTest, TheLaneOverTheLimitIsRefusedAsBusy) {
    constexpr int kLaneLimit = 512;
    make(2, serve_rpcs_in_place);
    bring_up();
    TestNode& b = node(2);
    std::vector<std::unique_ptr<RequesterLaneBase>> lanes;
    std::string err;
    with_engines([&] {
        for (int i = 0; i < kLaneLimit; i++) {
            lanes.push_back(lane_to(1, 2));
            if (lanes.back()->open(now_ns() + 5000000000ull, nullptr, &err) != Result::Ok) return;
        }
    });
    ASSERT_EQ(static_cast<int>(lanes.size()), kLaneLimit);
    ASSERT_TRUE(lanes.back()->is_open()) << err;
    ASSERT_TRUE(pump([&] {
        return load_relaxed(&b.peer(1).requester_lanes) == static_cast<uint32_t>(kLaneLimit);
    }));
    EXPECT_EQ(b.errors(ErrorType::Busy), 0u);
    auto over = lane_to(1, 2);
    EXPECT_EQ(open(*over, &err), Result::Failed);
    EXPECT_NE(err.find("busy"), std::string::npos) << err;
    EXPECT_TRUE(pump([&] { return b.errors(ErrorType::Busy) == 1; })) << b.errors(ErrorType::Busy);
    EXPECT_EQ(b.errors(ErrorType::UnauthenticatedLimit), 0u);
    // One lane less, and a new one is taken.
    lanes.front()->close();
    EXPECT_TRUE(pump([&] {
        return load_relaxed(&b.peer(1).requester_lanes) == static_cast<uint32_t>(kLaneLimit - 1);
    }));
    EXPECT_EQ(open(*over, &err), Result::Ok) << err;
    EXPECT_EQ(b.errors(ErrorType::Busy), 1u);
}

// The reply's seq is the one due, but it answers another RPC: not this
// call's reply, so the call fails (and closes the lane) rather than hand the
// caller someone else's answer.
TEST_P(LaneKinds, AReplyWithTheRightSeqButAnotherRpcIdFailsTheCall) {
    auto lane = up_with_lane();
    TestNode& b = node(2);
    std::string err;
    std::vector<uint8_t> reply;
    bool sent = false;
    ASSERT_EQ(call(*lane, make_rpc_id(12, 1), pattern(16, 1), &reply, &sent, &err), Result::Ok)
        << err;
    // The request carries one id and the caller waits for another: node 2
    // answers the request (seq 2, as due) with the id it carried.
    const auto req = request(make_rpc_id(12, 2), pattern(16, 2));
    Result r = Result::Ok;
    reply.clear();
    with_engines([&] {
        r = lane->call(req.data(), static_cast<uint32_t>(req.size()), 0, make_rpc_id(12, 3), 0,
                       now_ns() + 5000000000ull, nullptr, &reply, &sent, &err);
    });
    EXPECT_EQ(r, Result::Failed);
    EXPECT_TRUE(sent);
    EXPECT_TRUE(reply.empty());
    EXPECT_NE(err.find("unexpected frame"), std::string::npos) << err;
    EXPECT_FALSE(lane->is_open());
    EXPECT_EQ(b.served_in_place.size(), 2u) << "it ran: its reply came, with the seq due";
}

TEST_P(LaneKinds, StaleMeansALittleBehindOrTheSameAgain) {
    auto lane = up_with_lane();
    TestNode& b = node(2);
    std::string err;
    std::vector<uint8_t> reply;
    bool sent = false;
    auto ok = [&](uint32_t gen) {
        if (!lane->is_open()) {
            EXPECT_EQ(open(*lane, &err), Result::Ok) << err;
        }
        return call(*lane, make_rpc_id(9, gen), pattern(16, gen), &reply, &sent, &err,
                    300000000ull) == Result::Ok;
    };
    EXPECT_TRUE(ok(100000));
    EXPECT_FALSE(ok(100000)) << "the same request again is stale";
    EXPECT_FALSE(ok(99999)) << "one behind is stale";
    EXPECT_TRUE(ok(100000 - kStaleWindow - 5)) << "far behind: the generation wrapped";
    EXPECT_TRUE(ok(100001 - kStaleWindow)) << "counted from the new mark";
    EXPECT_EQ(load_relaxed(&b.peer(1).requests_voided), 2u);
}

TEST_P(LaneKinds, ARequestFromNoPossibleProcessDropsTheLane) {
    auto lane = up_with_lane();
    TestNode& b = node(2);
    std::string err;
    std::vector<uint8_t> reply;
    bool sent = false;
    EXPECT_NE(call(*lane, make_rpc_id(kMaxRpcSlots, 1), pattern(16, 1), &reply, &sent, &err,
                   2000000000ull),
              Result::Ok);
    EXPECT_TRUE(pump([&] { return load_relaxed(&b.peer(1).requester_lanes) == 0; }));
    EXPECT_EQ(b.served_in_place.size(), 0u);
}

TEST_F(RequesterTest, ASecondRequestBeforeTheReplyDropsTheLane) {
    auto lane = up_with_lane();
    TestNode& b = node(2);
    b.owner_serves = false;  // the first request's reply stays due
    std::string err;
    const uint64_t malformed = b.errors(ErrorType::MalformedFrame);
    std::vector<uint8_t> bytes;
    for (uint32_t seq = 1; seq <= 2; seq++) {  // crc mode in these tests: no seal
        const auto req = request(make_rpc_id(8, seq), pattern(32, seq));
        FrameHeader h;
        h.type = FrameType::Message;
        h.flags = kFlagRpcRequest;
        h.src_node = 1;
        h.payload_len = static_cast<uint32_t>(req.size());
        h.seq = seq;
        uint8_t hdr[kFrameHeaderSize];
        encode_frame_header(h, req.data(), hdr);
        bytes.insert(bytes.end(), hdr, hdr + kFrameHeaderSize);
        bytes.insert(bytes.end(), req.begin(), req.end());
    }
    ASSERT_EQ(::write(static_cast<RequesterLane&>(*lane).fd(), bytes.data(), bytes.size()),
              static_cast<ssize_t>(bytes.size()));
    EXPECT_TRUE(pump([&] { return b.errors(ErrorType::MalformedFrame) > malformed; }));
    EXPECT_TRUE(pump([&] { return load_relaxed(&b.peer(1).requester_lanes) == 0; }));
    EXPECT_EQ(b.state_of(1), PeerState::Up) << "the peer lanes are untouched";
}

TEST_P(LaneKinds, AReplyDueToAClosedLaneIsDroppedNotSentOnThePeerLanes) {
    auto lane = up_with_lane();
    TestNode& a = node(1);
    TestNode& b = node(2);
    b.owner_serves = false;  // the request waits in node 2's engine
    std::string err;
    std::vector<uint8_t> reply;
    bool sent = false;
    EXPECT_EQ(call(*lane, make_rpc_id(11, 1), pattern(16, 1), &reply, &sent, &err, 200000000ull),
              Result::Timeout);
    EXPECT_TRUE(sent);
    EXPECT_TRUE(pump([&] { return load_relaxed(&b.peer(1).requester_lanes) == 0; }));
    const uint64_t sent_before = load_relaxed(&b.peer(1).msgs_sent);
    b.owner_serves = true;  // now the reply comes, with its lane gone
    EXPECT_TRUE(pump([&] { return b.served_in_place.size() == 1; }));
    EXPECT_TRUE(pump([&] { return quiescent(); }));
    EXPECT_EQ(load_relaxed(&b.peer(1).msgs_sent), sent_before) << "not sent on a peer lane";
    EXPECT_EQ(a.errors(ErrorType::WrongSource), 0u);
}

// Over the peer lanes: node 1 restarts while node 2 still holds one of its
// requests, and its new instance numbers its RPCs afresh, so that its first
// RPC has the old one's id. The old reply must not complete it, and the new
// request must not run while its reply could not be told from the old one.
TEST_F(RequesterTest, AReplyDueToARestartedNodeNeverReachesItsNewInstance) {
    make(2, serve_rpcs_in_place);
    bring_up();
    TestNode& b = node(2);
    b.owner_serves = false;  // node 2 holds the request
    const uint64_t old_id = node(1).start_rpc(2, 1, 5, pattern(16, 1));
    ASSERT_NE(old_id, 0u);
    ASSERT_TRUE(pump([&] { return load_relaxed(&b.peer(1).rpcs_served) == 1; }));
    std::string err;
    ASSERT_TRUE(node(1).restart(5555, &err)) << err;
    bring_up();
    TestNode& a = node(1);
    const uint64_t voided = load_relaxed(&b.peer(1).requests_voided);
    const uint64_t new_id = a.start_rpc(2, 1, 5, pattern(16, 2));
    ASSERT_EQ(new_id, old_id) << "the case: the new instance reuses the id";
    EXPECT_TRUE(pump([&] { return load_relaxed(&b.peer(1).requests_voided) > voided; }))
        << "the new request is dropped while the old reply is due";
    b.owner_serves = true;  // the old request runs now; its reply is due to no one
    EXPECT_TRUE(pump([&] { return b.served_in_place.size() == 1; }));
    pump([] { return false; }, std::chrono::milliseconds(300));
    EXPECT_FALSE(a.rpc_done(1)) << "the old reply completed the new instance's RPC";
    EXPECT_EQ(b.served_in_place.size(), 1u) << "the new request did not run";
    // The next RPC of the slot has a new id and works.
    std::vector<uint8_t> reply;
    EXPECT_EQ(rpc(1, 2, pattern(16, 3), &reply, 2), PGRAC_IC_OK);
}

}  // namespace
}  // namespace pgrac::ic::enginetest
