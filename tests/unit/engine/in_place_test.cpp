// Serving in place: requests whose type the engine's owner serves itself never
// reach an LMS inbox, their replies leave without the outbound ring, the send
// budget stays balanced, and what the owner hands back reaches the LMS.
#include "engine/fixture.hpp"

namespace pgrac::ic::enginetest {
namespace {

constexpr uint16_t kRpcType = 300;  // what TestNode::start_rpc sends

void serve_rpcs_in_place(EngineConfig& c) {
    c.serve_in_place.assign(PGRAC_IC_MAX_MSG_TYPE + 1, false);
    c.serve_in_place[kRpcType] = true;
}

TEST_F(EngineTest, RequestsServedInPlaceNeverReachAnInbox) {
    make(2, serve_rpcs_in_place);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    for (uint32_t i = 0; i < 20; i++) {
        std::vector<uint8_t> reply;
        const auto body = pattern(64 + 400 * i, i);
        ASSERT_EQ(rpc(1, 2, body, &reply), PGRAC_IC_OK);
        EXPECT_EQ(reply, body);
    }
    EXPECT_EQ(b.served_in_place.size(), 20u);
    EXPECT_TRUE(b.received.empty()) << "no request went to an LMS worker";
    for (uint32_t w = 0; w < b.shm()->n_lms; w++) EXPECT_EQ(inbox_ring(b.shm(), w).pushed(), 0u);
    EXPECT_EQ(load_relaxed(&b.peer(1).rpcs_served), 20u);
    EXPECT_EQ(load_relaxed(&a.peer(2).rpcs_sent), 20u);
    // The replies took no ring record, and gave back what they took.
    EXPECT_TRUE(pump([&] { return quiescent(); }));
    EXPECT_EQ(load_relaxed(&b.peer(1).queued_msgs), 0u);
    EXPECT_EQ(load_relaxed(&b.peer(1).queued_bytes), 0u);
    // Other types still go to the LMS workers.
    ASSERT_TRUE(a.send(2, kStreamType, 3, stream_body(1)));
    ASSERT_TRUE(pump([&] { return b.received.size() == 1; }));
    EXPECT_EQ(b.served_in_place.size(), 20u);
}

TEST_F(EngineTest, RequestToSelfIsServedInPlace) {
    make(2, serve_rpcs_in_place);
    TestNode& a = node(1);
    std::vector<uint8_t> reply;
    ASSERT_EQ(rpc(1, 1, pattern(100, 4), &reply), PGRAC_IC_OK);
    EXPECT_EQ(reply, pattern(100, 4));
    EXPECT_EQ(a.served_in_place.size(), 1u);
    EXPECT_TRUE(a.received.empty());
    EXPECT_EQ(load_relaxed(&a.peer(1).queued_msgs), 0u);
    EXPECT_EQ(load_relaxed(&a.peer(1).queued_bytes), 0u);
}

TEST_F(EngineTest, RequestHandedBackIsServedByAnLmsWorkerInOrder) {
    make(2, serve_rpcs_in_place);
    bring_up();
    TestNode& b = node(2);
    b.hand_to_lms = true;  // every block would wait: the LMS serves them
    std::vector<uint8_t> reply;
    ASSERT_EQ(rpc(1, 2, pattern(300, 7), &reply), PGRAC_IC_OK);
    EXPECT_EQ(reply, pattern(300, 7));
    ASSERT_EQ(b.received.size(), 1u);
    EXPECT_EQ(b.received[0].worker, 5u % b.shm()->n_lms) << "routed by route key, as any other";
    EXPECT_GE(b.host().woken_lms[5u % b.shm()->n_lms], 1u) << "the LMS was woken at once";
    EXPECT_TRUE(b.served_in_place.empty());
}

TEST_F(EngineTest, ServingInPlaceChangesOnlyOnceTheInboxesAreEmpty) {
    make(2);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    b.serve = false;  // the LMS workers are busy: the first message waits in an inbox
    ASSERT_TRUE(a.send(2, kRpcType, 9, stream_body(0)));
    ASSERT_TRUE(pump([&] { return load_relaxed(&b.peer(1).msgs_recv) == 1; }));
    EngineConfig c;
    serve_rpcs_in_place(c);
    b.engine().set_serve_in_place(c.serve_in_place);
    // Still to the LMS: served in place, it would overtake the first.
    ASSERT_TRUE(a.send(2, kRpcType, 9, stream_body(1)));
    ASSERT_TRUE(pump([&] { return load_relaxed(&b.peer(1).msgs_recv) == 2; }));
    EXPECT_TRUE(b.served_in_place.empty());
    b.serve = true;
    ASSERT_TRUE(pump([&] { return b.received.size() == 2; }));
    EXPECT_EQ(stream_from(b, 1, kRpcType), iota_vec(2));
    // The inboxes are empty: the change has taken effect.
    ASSERT_TRUE(a.send(2, kRpcType, 9, stream_body(2)));
    ASSERT_TRUE(pump([&] { return b.served_in_place.size() == 1; }));
    EXPECT_EQ(b.received.size(), 2u);
}

// One route key's messages stay in order across the two paths.
TEST_F(EngineTest, ARequestBehindItsRouteKeysInboxGoesToTheLms) {
    make(2, serve_rpcs_in_place);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    b.serve = false;
    ASSERT_TRUE(a.send(2, kStreamType, 9, stream_body(0)));  // waits in inbox 9 % n
    ASSERT_TRUE(pump([&] { return load_relaxed(&b.peer(1).msgs_recv) == 1; }));
    ASSERT_TRUE(a.send(2, kRpcType, 9, stream_body(1)));  // would overtake it in place
    ASSERT_TRUE(pump([&] { return load_relaxed(&b.peer(1).msgs_recv) == 2; }));
    EXPECT_TRUE(b.served_in_place.empty());
    b.serve = true;
    ASSERT_TRUE(pump([&] { return b.received.size() == 2; }));
    EXPECT_EQ(b.received[0].mh.msg_type, kStreamType);
    EXPECT_EQ(b.received[1].mh.msg_type, kRpcType);
}

TEST_F(EngineTest, AHeldRequestGoesToTheLmsBeforeALaterMessageOfItsRouteKey) {
    make(2, serve_rpcs_in_place);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    b.owner_serves = false;  // the owner is busy: the request stays held
    b.serve = false;
    ASSERT_TRUE(a.send(2, kRpcType, 9, stream_body(0)));
    ASSERT_TRUE(pump([&] { return load_relaxed(&b.peer(1).msgs_recv) == 1; }));
    ASSERT_TRUE(a.send(2, kStreamType, 9, stream_body(1)));  // for the LMS, same key
    ASSERT_TRUE(pump([&] { return load_relaxed(&b.peer(1).msgs_recv) == 2; }));
    b.serve = true;
    b.owner_serves = true;
    ASSERT_TRUE(pump([&] { return b.received.size() == 2; }));
    EXPECT_EQ(b.received[0].mh.msg_type, kRpcType) << "the held one first";
    EXPECT_EQ(b.received[1].mh.msg_type, kStreamType);
    EXPECT_TRUE(b.served_in_place.empty());
}

TEST_F(EngineTest, RequestsHandedOnOneByOneKeepTheirOrder) {
    make(2, serve_rpcs_in_place);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    b.owner_serves = false;
    for (uint32_t i = 0; i < 4; i++) ASSERT_TRUE(a.send(2, kRpcType, 9, stream_body(i)));
    ASSERT_TRUE(pump([&] { return load_relaxed(&b.peer(1).msgs_recv) == 4; }));
    b.hand_to_lms = true;  // each would wait: the owner hands them on as it takes them
    b.owner_serves = true;
    ASSERT_TRUE(pump([&] { return b.received.size() == 4; }));
    EXPECT_EQ(stream_from(b, 1, kRpcType), iota_vec(4));
}

TEST_F(EngineTest, ShutdownHandsWhatIsHeldToTheLmsInboxes) {
    make(2, serve_rpcs_in_place);
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    b.owner_serves = false;
    b.serve = false;
    for (uint32_t i = 0; i < 3; i++) ASSERT_TRUE(a.send(2, kRpcType, i, stream_body(i)));
    ASSERT_TRUE(pump([&] { return load_relaxed(&b.peer(1).msgs_recv) == 3; }));
    uint64_t pushed = 0;
    for (uint32_t w = 0; w < b.shm()->n_lms; w++) pushed += inbox_ring(b.shm(), w).pushed();
    EXPECT_EQ(pushed, 0u) << "held for the owner";
    b.engine().shutdown();
    pushed = 0;
    for (uint32_t w = 0; w < b.shm()->n_lms; w++) pushed += inbox_ring(b.shm(), w).pushed();
    EXPECT_EQ(pushed, 3u) << "accepted messages outlive the listener in the inboxes";
}

}  // namespace
}  // namespace pgrac::ic::enginetest
