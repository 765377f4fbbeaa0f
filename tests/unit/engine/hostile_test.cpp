// The engine against peers that break the rules: an impostor that holds the
// key, a session reset seen by one side, frames a peer must not send, floods
// of unauthenticated connections, and secure mode against replays.
#include <gtest/gtest.h>

#include <unistd.h>

#include "engine/fixture.hpp"

namespace pgrac::ic::enginetest {
namespace {

uint64_t errors(TestNode& n, ErrorType t) {
    return n.shm()->errors.total(t);
}

class EngineHostileTest : public EngineTest {
  protected:
    // Every message of a stream arrives once and in order, both ways, and an RPC
    // each way succeeds: the link works.
    void expect_link_works(uint16_t a, uint16_t b, uint32_t base) {
        for (uint32_t i = 0; i < 20; i++) {
            ASSERT_TRUE(node(a).send(b, kStreamType, 1, stream_body(base + i)));
            ASSERT_TRUE(node(b).send(a, kStreamType, 1, stream_body(base + i)));
        }
        auto tail = [&](TestNode& n, uint16_t src) {
            std::vector<uint32_t> v = stream_from(n, src), out;
            for (uint32_t x : v)
                if (x >= base && x < base + 20) out.push_back(x - base);
            return out;
        };
        ASSERT_TRUE(pump([&] {
            return tail(node(b), a).size() >= 20 && tail(node(a), b).size() >= 20;
        })) << "stream stalled"
            << [&] {
                   std::string out;
                   for (uint16_t id : {a, b})
                       for (const auto& l : node(id).host().logs)
                           out += "\n node " + std::to_string(id) + ": " + l.second;
                   return out;
               }();
        EXPECT_EQ(tail(node(b), a), iota_vec(20));
        EXPECT_EQ(tail(node(a), b), iota_vec(20));
        EXPECT_EQ(rpc(a, b, pattern(100, base)), PGRAC_IC_OK);
        EXPECT_EQ(rpc(b, a, pattern(100, base + 1)), PGRAC_IC_OK);
    }

    // An instance that claims node `id` with another incarnation, at its own
    // address (the real node's port is taken).
    // A second instance configured as node `id`: from another data directory
    // (a location of its own), or `same_place` as the real one's (what only a
    // restart of the real node can be).
    std::unique_ptr<TestNode> impostor(uint16_t id, uint64_t incarnation, bool same_place = false) {
        std::vector<NodeAddress> nodes = addrs_;
        for (NodeAddress& n : nodes)
            if (n.node_id == id) n.port = free_port("127.0.0.1");
        EngineConfig cfg = make_config(id, nodes, incarnation);
        if (!same_place) cfg.identity.location = 9000 + id;
        auto n = std::make_unique<TestNode>(cfg);
        std::string err;
        EXPECT_TRUE(n->start(&err)) << err;
        return n;
    }
};

TEST_F(EngineHostileTest, ImpostorWithTheKeyIsRefusedWhileTheRealNodeIsConnected) {
    make(2);
    bring_up();
    // Node 1 dials node 2; a second "node 1" holding the key dials it too.
    std::unique_ptr<TestNode> fake = impostor(1, 777);
    std::vector<TestNode*> with_fake = all();
    with_fake.push_back(fake.get());
    ASSERT_TRUE(pump_until(with_fake, [&] {
        return errors(node(2), ErrorType::DuplicateNode) >= 2 &&
               errors(*fake, ErrorType::DuplicateNode) >= 2;
    })) << "the impostor was not refused";
    EXPECT_TRUE(fake->host().logged("are two instances configured with cluster.node_id = 1"));
    EXPECT_TRUE(node(2).host().logged("instance 777 claiming node 1 is refused"));
    EXPECT_GE(load_relaxed(&node(2).peer(1).duplicate_refusals), 1u);
    EXPECT_EQ(fake->state_of(2), PeerState::Error);
    // The real session was never disturbed.
    EXPECT_EQ(node(2).peer(1).incarnation, 1001u);
    EXPECT_EQ(load_relaxed(&node(2).peer(1).session_resets), 0u);
    EXPECT_EQ(load_relaxed(&node(1).peer(2).session_resets), 0u);
    EXPECT_EQ(node(2).state_of(1), PeerState::Up);
    expect_link_works(1, 2, 100);
}

TEST_F(EngineHostileTest, ASessionResetIsAlwaysTwoSided) {
    make(2);
    bring_up();
    expect_link_works(1, 2, 0);
    // The real node 1 loses its connections and cannot redial; meanwhile an
    // instance from node 1's own place gets in (node 2 takes it for node 1
    // restarted) and node 2 starts new sessions with it. Then that instance
    // goes and node 1 comes back (from the same place: admitted again).
    node(1).net().refuse_connects = true;
    node(1).net().kill_all();
    ASSERT_TRUE(pump([&] { return node(2).peer(1).lanes_up == 0; }));
    {
        std::unique_ptr<TestNode> fake = impostor(1, 777, true);
        std::vector<TestNode*> with_fake = all();
        with_fake.push_back(fake.get());
        ASSERT_TRUE(pump_until(with_fake, [&] { return fake->state_of(2) == PeerState::Up; }));
        ASSERT_TRUE(pump_until(with_fake, [&] { return node(2).peer(1).incarnation == 777u; }));
        ASSERT_TRUE(fake->send(2, kStreamType, 1, stream_body(999)));
        ASSERT_TRUE(pump_until(with_fake, [&] { return stream_from(node(2), 1).back() == 999; }));
    }
    node(1).net().refuse_connects = false;
    // Node 2's session was the impostor's; node 1's the old one: both start again.
    ASSERT_TRUE(pump([&] { return fully_up() && node(2).peer(1).incarnation == 1001u; }));
    EXPECT_GE(load_relaxed(&node(1).peer(2).session_resets), 1u);
    EXPECT_GE(load_relaxed(&node(2).peer(1).session_resets), 1u);
    expect_link_works(1, 2, 200);
    EXPECT_TRUE(pump([&] { return quiescent(); }));
}

TEST_F(EngineHostileTest, PeersBuiltWithAnotherLargestMessageAreRefused) {
    make(2, [](EngineConfig& c) {
        if (c.identity.node_id == 2) c.identity.max_message = 1024;
    });
    ASSERT_TRUE(pump([&] {
        return errors(node(1), ErrorType::LimitMismatch) >= 1 &&
               errors(node(2), ErrorType::LimitMismatch) >= 1;
    }));
    EXPECT_NE(node(1).state_of(2), PeerState::Up);
    EXPECT_TRUE(node(2).host().logged("PGRAC_IC_MAX_MESSAGE"));
}

TEST_F(EngineHostileTest, AMessageOverTheAgreedLimitIsNeverAcknowledged) {
    make(2, [](EngineConfig& c) { c.identity.max_message = 1024; });
    bring_up();
    // Node 1's next message leaves with 2000 bytes of body instead of 100:
    // node 2 refuses it before it counts as received, so node 1 resends its
    // own (intact) copy after the reconnect.
    node(1).net().rewrite_next_message(
        [](FrameHeader&, std::vector<uint8_t>& body) { body.resize(kMessageHeaderSize + 2000); });
    ASSERT_TRUE(node(1).send(2, kStreamType, 1, stream_body(5, 96)));
    ASSERT_TRUE(pump([&] { return !stream_from(node(2), 1).empty(); }));
    EXPECT_GE(errors(node(2), ErrorType::OversizedMessage), 1u);
    ASSERT_EQ(node(2).received.size(), 1u);
    EXPECT_EQ(node(2).received[0].body.size(), 100u);
    EXPECT_TRUE(pump([&] { return fully_up() && quiescent(); }));
}

TEST_F(EngineHostileTest, BadMessageHeadersAndAcksDropTheConnectionNotTheMessage) {
    make(2);
    bring_up();
    const uint64_t malformed = errors(node(2), ErrorType::MalformedFrame);
    struct Case {
        const char* what;
        std::function<void(FrameHeader&, std::vector<uint8_t>&)> fn;
    };
    const std::vector<Case> cases = {
        {"reserved", [](FrameHeader&, std::vector<uint8_t>& b) { b[20] = 1; }},
        {"type", [](FrameHeader&, std::vector<uint8_t>& b) { b[1] = 0x10; }},  // type 4096+
        {"ack", [](FrameHeader& h, std::vector<uint8_t>&) { h.ack += 1000; }},
        {"void rpc",
         [](FrameHeader& h, std::vector<uint8_t>& b) {
             b[0] = b[1] = 0;
             h.flags |= kFlagRpcRequest;
         }},
    };
    uint32_t next = 0;
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        node(1).net().rewrite_next_message(c.fn);
        ASSERT_TRUE(node(1).send(2, kStreamType, 1, stream_body(next)));
        ASSERT_TRUE(pump([&] {
            auto v = stream_from(node(2), 1);
            return !v.empty() && v.back() == next;
        }));
        next++;
    }
    EXPECT_EQ(stream_from(node(2), 1), iota_vec(next));  // each once, intact
    EXPECT_GE(errors(node(2), ErrorType::MalformedFrame), malformed + cases.size());
    EXPECT_GE(load_relaxed(&node(1).peer(2).reconnects), cases.size());
    EXPECT_TRUE(pump([&] { return fully_up() && quiescent(); }));
}

TEST_F(EngineHostileTest, UnauthenticatedConnectionsAreCappedAndTheirLogThrottled) {
    make(2, [](EngineConfig& c) { c.max_unauthenticated = 4; });
    bring_up();
    std::vector<int> fds;
    for (int i = 0; i < 40; i++) {
        const int fd = raw_connect(addrs_[1].port);
        ASSERT_GE(fd, 0);
        fds.push_back(fd);
    }
    ASSERT_TRUE(pump([&] { return errors(node(2), ErrorType::UnauthenticatedLimit) >= 36; }));
    EXPECT_LE(node(2).shm()->errors.total(ErrorType::HandshakeFailed), 0u);
    int lines = 0;
    for (const auto& l : node(2).host().logs)
        lines += l.second.find("cluster.max_unauthenticated") != std::string::npos ? 1 : 0;
    EXPECT_EQ(lines, 1) << "one line per 10 s, not one per connection";
    // A peer with the key gets through at once while the idle connections
    // are held (they are pushed out, oldest first).
    node(1).net().kill_all();
    ASSERT_TRUE(pump([&] { return node(2).peer(1).lanes_up == 0; }));
    ASSERT_TRUE(pump([&] { return fully_up(); }, milliseconds(2000)))
        << "a real peer could not reconnect while idle connections were held";
    expect_link_works(1, 2, 300);
    for (int fd : fds) close(fd);
}

TEST_F(EngineHostileTest, BeforeAuthenticationFramesAreHandshakeSized) {
    make(2);
    bring_up();
    const uint64_t before = errors(node(2), ErrorType::OversizedMessage);
    const int fd = raw_connect(addrs_[1].port);
    ASSERT_GE(fd, 0);
    FrameHeader h;
    h.type = FrameType::Hello;
    h.src_node = 1;
    const std::vector<uint8_t> f =
        tiers::transporttest::make_frame(h, std::vector<uint8_t>(kMaxHandshakePayload + 1));
    ASSERT_EQ(::write(fd, f.data(), f.size()), static_cast<ssize_t>(f.size()));
    ASSERT_TRUE(pump([&] { return errors(node(2), ErrorType::OversizedMessage) > before; }));
    ::close(fd);
    expect_link_works(1, 2, 400);
}

class EngineProtectedTest : public EngineHostileTest,
                            public ::testing::WithParamInterface<WireProtection> {};

TEST_P(EngineProtectedTest, RpcsOfEverySizeAndReplayedFramesAreRefused) {
    make(2, [](EngineConfig& c) {
        c.identity.protection = GetParam();
        c.rekey_interval = 64;  // roll keys over often during the test
    });
    bring_up();
    for (size_t n : {size_t{0}, size_t{1}, size_t{8192}, size_t{65536}}) {
        std::vector<uint8_t> reply;
        ASSERT_EQ(rpc(1, 2, pattern(n, 3), &reply), PGRAC_IC_OK) << n;
        EXPECT_EQ(reply, pattern(n, 3));
    }
    expect_link_works(1, 2, 0);
    // Frames recorded on the wire and written again: refused by their tag.
    node(1).net().keep_history(true);
    for (uint32_t i = 0; i < 10; i++)
        ASSERT_TRUE(node(1).send(2, kStreamType, 1, stream_body(50 + i)));
    ASSERT_TRUE(pump([&] { return stream_from(node(2), 1).size() >= 20 + 10; }));
    ASSERT_GT(node(1).net().replay_old_messages(), 0u);
    ASSERT_TRUE(pump([&] { return errors(node(2), ErrorType::FrameAuthFailed) >= 1; }));
    ASSERT_TRUE(pump([&] { return fully_up(); }));
    expect_link_works(1, 2, 100);
    EXPECT_EQ(load_relaxed(&node(2).peer(1).duplicates_dropped), 0u)
        << "a replay must never reach the session";
}

INSTANTIATE_TEST_SUITE_P(MacAndSecure, EngineProtectedTest,
                         ::testing::Values(WireProtection::Mac, WireProtection::Secure),
                         [](const auto& info) { return wire_protection_name(info.param); });

}  // namespace
}  // namespace pgrac::ic::enginetest
