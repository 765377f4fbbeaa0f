// Handshake v2: full exchanges between a real dialer and acceptor, every
// refusal, what an unauthenticated peer can learn, the session decision, and
// hand-built payloads that pin down the wire layout and the proofs.
#include "ic/session/handshake.hpp"
#include "ic/membership/membership.hpp"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace pgrac::ic {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr uint64_t kSystemId = 0x1122334455667788ULL;
const std::string kKey = "0123456789abcdef-shared-secret-32b";

class TestPolicy : public HandshakePolicy {
  public:
    std::map<uint16_t, std::string> addresses;  // known nodes and where they connect from
    std::map<std::pair<uint16_t, uint8_t>, LaneState> lanes;  // by (node, lane)
    uint8_t lane_count = 4;
    RejectReason admit_verdict = RejectReason::None;
    std::vector<std::pair<uint16_t, uint64_t>> admitted;  // what admit() was asked

    RejectReason check_peer(uint16_t node_id, const std::string& peer_address,
                            uint8_t lane) override {
        auto it = addresses.find(node_id);
        if (it == addresses.end()) return RejectReason::UnknownNode;
        if (it->second != peer_address) return RejectReason::AddressMismatch;
        return lane < lane_count ? RejectReason::None : RejectReason::UnknownLane;
    }
    LaneState lane_state(uint16_t node_id, uint8_t lane) override {
        auto it = lanes.find({node_id, lane});
        return it == lanes.end() ? LaneState{} : it->second;
    }
    RejectReason admit(uint16_t node_id, uint64_t incarnation, uint64_t, uint64_t, uint8_t,
                       std::string* why) override {
        admitted.emplace_back(node_id, incarnation);
        if (admit_verdict != RejectReason::None) *why = "node is connected as another instance";
        return admit_verdict;
    }
};

LocalIdentity identity(uint16_t node, uint64_t incarnation, const std::string& key = kKey) {
    LocalIdentity id;
    id.cluster_name = "prod";
    id.system_id = kSystemId;
    id.node_id = node;
    id.incarnation = incarnation;
    id.instance = incarnation;
    id.key.assign(key.begin(), key.end());
    return id;
}

// Little-endian builder, written from the spec independently of the implementation.
struct Builder {
    Bytes b;
    Builder& le(uint64_t v, int n) {
        for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
        return *this;
    }
    Builder& str(const std::string& s) {
        b.push_back(static_cast<uint8_t>(s.size()));
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    Builder& raw(const Bytes& r) {
        b.insert(b.end(), r.begin(), r.end());
        return *this;
    }
};

Bytes hello_payload(uint8_t min_v, uint8_t max_v, const std::string& cluster, uint64_t sysid,
                    uint16_t node, uint8_t lane = 0) {
    return Builder{}
        .le(min_v, 1)
        .le(max_v, 1)
        .str(cluster)
        .le(sysid, 8)
        .le(node, 2)
        .le(lane, 1)
        .raw(Bytes(kNonceSize, 0xab))
        .b;
}

Bytes hmac(const std::string& key, const std::string& label, const Bytes& transcript) {
    Bytes msg(label.begin(), label.end());
    msg.insert(msg.end(), transcript.begin(), transcript.end());
    Bytes out(EVP_MAX_MD_SIZE);
    unsigned int len = 0;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg.data(), msg.size(), out.data(),
         &len);
    out.resize(len);
    return out;
}

Bytes concat(Bytes a, const Bytes& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

Bytes head(const Bytes& b, size_t drop_tail) {
    return Bytes(b.begin(), b.end() - static_cast<long>(drop_tail));
}

struct Wire {
    std::vector<HandshakeOutput> to_acceptor, to_dialer;
};

// Runs the exchange to the end; `tamper` may rewrite a frame in flight.
Wire run(Handshake& dialer, Handshake& acceptor, uint16_t dialer_node = 1,
         uint16_t acceptor_node = 2,
         const std::function<void(bool to_acceptor, HandshakeOutput&)>& tamper = {}) {
    Wire w;
    std::vector<HandshakeOutput> pending = dialer.start();
    bool to_acceptor = true;
    for (int round = 0; !pending.empty() && round < 10; ++round) {
        std::vector<HandshakeOutput> next;
        for (HandshakeOutput& f : pending) {
            if (tamper) tamper(to_acceptor, f);
            (to_acceptor ? w.to_acceptor : w.to_dialer).push_back(f);
            (to_acceptor ? acceptor : dialer)
                .on_frame(f.type, to_acceptor ? dialer_node : acceptor_node, f.payload.data(),
                          f.payload.size(), &next);
        }
        pending = std::move(next);
        to_acceptor = !to_acceptor;
    }
    return w;
}

// Node 1 (10.0.0.1) dials node 2 unless a test changes the pieces first.
struct Cluster {
    TestPolicy dialer_policy, acceptor_policy;
    LocalIdentity dialer_id = identity(1, 1001);
    LocalIdentity acceptor_id = identity(2, 2002);
    uint16_t expected_peer = 2;
    uint8_t lane = 0;
    std::string peer_address = "10.0.0.1";

    Cluster() {
        acceptor_policy.addresses = {{1, "10.0.0.1"}, {3, "10.0.0.3"}};
        dialer_policy.addresses = {{2, "10.0.0.2"}};
    }
    Handshake dialer() {
        return Handshake(Handshake::Role::Dialer, dialer_id, dialer_policy, expected_peer, {},
                         lane);
    }
    Handshake acceptor() {
        return Handshake(Handshake::Role::Acceptor, acceptor_id, acceptor_policy, 0, peer_address);
    }
};

void feed(Handshake& h, FrameType t, uint16_t src, const Bytes& p,
          std::vector<HandshakeOutput>* out) {
    h.on_frame(t, src, p.data(), p.size(), out);
}

// The detail a Reject frame carries (its reason must be the refuser's).
std::string reject_detail(const Handshake& h, const std::vector<HandshakeOutput>& out) {
    EXPECT_FALSE(out.empty());
    if (out.empty()) return {};
    const HandshakeOutput& r = out.back();
    EXPECT_EQ(r.type, FrameType::Reject);
    EXPECT_GE(r.payload.size(), 3u);
    if (r.payload.size() < 3) return {};
    EXPECT_EQ(r.payload[0] | (r.payload[1] << 8), static_cast<int>(h.reject_reason()));
    EXPECT_EQ(r.payload.size(), 3u + r.payload[2]);
    return std::string(r.payload.begin() + 3, r.payload.end());
}

// One side refused; the other received its Reject.
void expect_refused(const Handshake& refuser, const Handshake& other, RejectReason reason) {
    EXPECT_TRUE(refuser.failed());
    EXPECT_EQ(refuser.reject_reason(), reason);
    EXPECT_FALSE(refuser.rejected_by_peer());
    EXPECT_TRUE(other.failed());
    EXPECT_EQ(other.reject_reason(), reason);
    EXPECT_TRUE(other.rejected_by_peer());
    EXPECT_NE(other.error_text().find(std::string("rejected the connection: ") +
                                      reject_reason_name(reason)),
              std::string::npos)
        << other.error_text();
}

TEST(Handshake, FullExchangeFillsBothPeers) {
    Cluster c;
    c.dialer_policy.lanes[{2, 0}] = {55, 41};
    c.acceptor_policy.lanes[{1, 0}] = {55, 17};
    Handshake d = c.dialer(), a = c.acceptor();
    EXPECT_EQ(d.state(), Handshake::State::Start);
    EXPECT_EQ(a.state(), Handshake::State::WaitHello);
    EXPECT_TRUE(a.start().empty());

    Wire w = run(d, a);
    ASSERT_TRUE(d.done()) << d.error_text();
    ASSERT_TRUE(a.done()) << a.error_text();
    ASSERT_EQ(w.to_acceptor.size(), 2u);
    ASSERT_EQ(w.to_dialer.size(), 2u);
    EXPECT_EQ(w.to_acceptor[0].type, FrameType::Hello);
    EXPECT_EQ(w.to_dialer[0].type, FrameType::HelloReply);
    EXPECT_EQ(w.to_acceptor[1].type, FrameType::Auth);
    EXPECT_EQ(w.to_dialer[1].type, FrameType::AuthOk);

    EXPECT_EQ(d.peer().node_id, 2);
    EXPECT_EQ(d.peer().incarnation, 2002u);
    EXPECT_EQ(d.peer().last_seq_received, 17u);  // what node 2 has of node 1's messages
    EXPECT_EQ(d.peer().version, 3);
    EXPECT_EQ(d.peer().max_message, 65536u);
    EXPECT_EQ(a.peer().node_id, 1);
    EXPECT_EQ(a.peer().incarnation, 1001u);
    EXPECT_EQ(a.peer().last_seq_received, 41u);
    EXPECT_EQ(a.peer().version, 3);
    // The same session continues on both sides.
    EXPECT_EQ(d.peer().session_id, 55u);
    EXPECT_EQ(a.peer().session_id, 55u);
    EXPECT_FALSE(d.peer().new_session);
    EXPECT_FALSE(a.peer().new_session);
    // One key per direction, the same on both ends.
    EXPECT_EQ(d.peer().keys.send, a.peer().keys.recv);
    EXPECT_EQ(d.peer().keys.recv, a.peer().keys.send);
    EXPECT_NE(d.peer().keys.send, d.peer().keys.recv);
    // Each side asked its owner to admit the authenticated peer's instance.
    ASSERT_EQ(c.acceptor_policy.admitted.size(), 1u);
    EXPECT_EQ(c.acceptor_policy.admitted[0], std::make_pair(uint16_t{1}, uint64_t{1001}));
    ASSERT_EQ(c.dialer_policy.admitted.size(), 1u);
    EXPECT_EQ(c.dialer_policy.admitted[0], std::make_pair(uint16_t{2}, uint64_t{2002}));
    EXPECT_TRUE(d.start().empty());  // already started
}

TEST(Handshake, SessionDecisionIsTheSameOnBothSides) {
    struct Case {
        uint64_t dialer, acceptor;
        bool new_session;
    };
    for (const Case& k : {Case{0, 0, false}, Case{7, 7, false}, Case{7, 8, true}, Case{0, 8, true},
                          Case{7, 0, true}}) {
        Cluster c;
        c.dialer_policy.lanes[{2, 0}] = {k.dialer, 9};
        c.acceptor_policy.lanes[{1, 0}] = {k.acceptor, 5};
        Handshake d = c.dialer(), a = c.acceptor();
        run(d, a);
        ASSERT_TRUE(d.done() && a.done()) << d.error_text() << a.error_text();
        SCOPED_TRACE(std::to_string(k.dialer) + "/" + std::to_string(k.acceptor));
        EXPECT_EQ(d.peer().new_session, k.new_session);
        EXPECT_EQ(a.peer().new_session, k.new_session);
        EXPECT_EQ(d.peer().session_id, a.peer().session_id);
        EXPECT_NE(d.peer().session_id, 0u);
        EXPECT_EQ(d.peer().offered_session, k.dialer);
        EXPECT_EQ(a.peer().offered_session, k.acceptor);
        if (k.dialer == k.acceptor && k.dialer != 0) {
            EXPECT_EQ(d.peer().session_id, k.dialer);
        }
        if (k.new_session) {
            EXPECT_NE(d.peer().session_id, k.dialer);
            EXPECT_NE(d.peer().session_id, k.acceptor);
        }
    }
}

TEST(Handshake, EachConnectionGetsFreshKeysAndSessionIds) {
    Cluster c;
    Handshake d1 = c.dialer(), a1 = c.acceptor();
    run(d1, a1);
    Handshake d2 = c.dialer(), a2 = c.acceptor();
    run(d2, a2);
    ASSERT_TRUE(d1.done() && d2.done());
    EXPECT_NE(d1.peer().keys.send, d2.peer().keys.send);
    EXPECT_NE(d1.peer().session_id, d2.peer().session_id);
}

TEST(Handshake, LaneTravelsInTheHelloAndSelectsTheSession) {
    Cluster c;
    c.lane = 3;
    c.dialer_policy.lanes = {{{2, 0}, {4, 1}}, {{2, 3}, {9, 41}}};
    c.acceptor_policy.lanes = {{{1, 0}, {4, 2}}, {{1, 3}, {9, 17}}};
    Handshake d = c.dialer(), a = c.acceptor();
    Wire w = run(d, a);
    ASSERT_TRUE(d.done()) << d.error_text();
    ASSERT_TRUE(a.done()) << a.error_text();
    const Bytes& hello = w.to_acceptor[0].payload;
    EXPECT_EQ(hello[hello.size() - kNonceSize - 1], 3);
    EXPECT_EQ(a.peer().lane, 3);
    EXPECT_EQ(a.peer().last_seq_received, 41u);
    EXPECT_EQ(d.peer().lane, 3);
    EXPECT_EQ(d.peer().last_seq_received, 17u);
    EXPECT_EQ(d.peer().session_id, 9u);
}

TEST(Handshake, WireLayoutAndProofsFollowTheSpec) {
    Cluster c;
    c.dialer_policy.lanes[{2, 0}] = {0x1111, 0x01020304};
    c.acceptor_policy.lanes[{1, 0}] = {0x2222, 0x0a0b0c0d};
    c.dialer_id.protection = WireProtection::Mac;
    Handshake d = c.dialer(), a = c.acceptor();
    Wire w = run(d, a);
    ASSERT_TRUE(a.done() && d.done());

    const Bytes& hello = w.to_acceptor[0].payload;
    Bytes prefix = Builder{}.le(3, 1).le(3, 1).str("prod").le(kSystemId, 8).le(1, 2).le(0, 1).b;
    ASSERT_EQ(hello.size(), prefix.size() + kNonceSize);
    EXPECT_EQ(head(hello, kNonceSize), prefix);

    // The acceptor's first answer is a version and a nonce: nothing derived from the key.
    const Bytes& reply = w.to_dialer[0].payload;
    ASSERT_EQ(reply.size(), 1u + kNonceSize);
    EXPECT_EQ(reply[0], 3);
    EXPECT_NE(Bytes(hello.end() - kNonceSize, hello.end()), Bytes(reply.begin() + 1, reply.end()));

    const Bytes& auth = w.to_acceptor[1].payload;
    // incarnation, instance, location, session, last seq, largest message,
    // protection, then the settings: lms_workers, tcp_paths, witnesses, nodes digest.
    Bytes auth_body = Builder{}
                          .le(1001, 8)
                          .le(1001, 8)
                          .le(0, 8)
                          .le(0x1111, 8)
                          .le(0x01020304, 4)
                          .le(65536, 4)
                          .le(1, 1)
                          .le(0, 2)
                          .le(0, 1)
                          .le(0, 8)
                          .le(0, 8)
                          .b;
    ASSERT_EQ(auth.size(), auth_body.size() + kProofSize);
    EXPECT_EQ(head(auth, kProofSize), auth_body);
    Bytes transcript = concat(concat(hello, reply), auth_body);
    EXPECT_EQ(Bytes(auth.end() - kProofSize, auth.end()),
              hmac(kKey, "pgrac-ic v2 dialer", transcript));

    const Bytes& ok = w.to_dialer[1].payload;
    // Protection: the stronger of mac (dialer) and secure (acceptor's default).
    Bytes ok_body = Builder{}
                        .le(2, 2)
                        .le(2002, 8)
                        .le(2002, 8)
                        .le(0, 8)
                        .le(0x2222, 8)
                        .le(0x0a0b0c0d, 4)
                        .le(65536, 4)
                        .le(2, 1)
                        .le(0, 2)
                        .le(0, 1)
                        .le(0, 8)
                        .le(0, 8)
                        .b;
    ASSERT_EQ(ok.size(), ok_body.size() + kProofSize);
    EXPECT_EQ(head(ok, kProofSize), ok_body);
    transcript = concat(concat(transcript, Bytes(auth.end() - kProofSize, auth.end())), ok_body);
    EXPECT_EQ(Bytes(ok.end() - kProofSize, ok.end()),
              hmac(kKey, "pgrac-ic v2 acceptor", transcript));
    EXPECT_EQ(d.peer().protection, WireProtection::Secure);
    EXPECT_EQ(a.peer().protection, WireProtection::Secure);
}

TEST(Handshake, ProtectionIsTheStrongerOffer) {
    for (int dp = 0; dp <= kMaxWireProtection; ++dp) {
        for (int ap = 0; ap <= kMaxWireProtection; ++ap) {
            Cluster c;
            c.dialer_id.protection = static_cast<WireProtection>(dp);
            c.acceptor_id.protection = static_cast<WireProtection>(ap);
            Handshake d = c.dialer(), a = c.acceptor();
            run(d, a);
            ASSERT_TRUE(d.done() && a.done()) << d.error_text() << a.error_text();
            EXPECT_EQ(static_cast<int>(d.peer().protection), std::max(dp, ap));
            EXPECT_EQ(static_cast<int>(a.peer().protection), std::max(dp, ap));
        }
    }
}

TEST(Handshake, AWrongKeyIsFoundByTheAcceptorBeforeItProvesAnything) {
    Cluster c;
    c.dialer_id = identity(1, 1001, "another-key-of-enough-length-xxxx");
    Handshake d = c.dialer(), a = c.acceptor();
    Wire w = run(d, a);
    expect_refused(a, d, RejectReason::WrongKey);
    EXPECT_NE(a.error_text().find("Auth proof"), std::string::npos) << a.error_text();
    ASSERT_EQ(w.to_dialer.size(), 2u);  // HelloReply, then the Reject instead of AuthOk
    EXPECT_EQ(w.to_dialer[1].type, FrameType::Reject);
    // The unproven dialer learns the reason and nothing else.
    EXPECT_EQ(w.to_dialer[1].payload, Builder{}.le(7, 2).le(0, 1).b);
}

TEST(Handshake, DialerChecksTheAcceptorsProof) {
    Cluster c;
    Handshake d = c.dialer(), a = c.acceptor();
    Wire w = run(d, a, 1, 2, [](bool to_acceptor, HandshakeOutput& f) {
        if (!to_acceptor && f.type == FrameType::AuthOk) f.payload.back() ^= 1;
    });
    EXPECT_TRUE(d.failed());
    EXPECT_EQ(d.reject_reason(), RejectReason::WrongKey);
    EXPECT_TRUE(a.rejected_by_peer());  // it had answered; the dialer's Reject closes
    EXPECT_NE(d.error_text().find("AuthOk proof"), std::string::npos) << d.error_text();
}

TEST(Handshake, RefusalsBeforeTheProofCarryNoDetail) {
    struct Case {
        Bytes hello;
        std::string address;
        RejectReason reason;
        std::string logged;  // what our own log says
    };
    const std::vector<Case> cases = {
        {hello_payload(3, 3, "other", kSystemId, 1), "10.0.0.1", RejectReason::ClusterMismatch,
         "expected \"prod\""},
        {hello_payload(3, 3, "prod", 42, 1), "10.0.0.1", RejectReason::SystemMismatch,
         "expected 1234605616436508552"},
        {hello_payload(3, 3, "prod", kSystemId, 9), "10.0.0.1", RejectReason::UnknownNode,
         "not in cluster.nodes"},
        {hello_payload(3, 3, "prod", kSystemId, 3), "10.0.0.1", RejectReason::AddressMismatch,
         "\"10.0.0.1\""},
        {hello_payload(3, 3, "prod", kSystemId, 1, 4), "10.0.0.1", RejectReason::UnknownLane,
         "lane 4"},
        {hello_payload(3, 3, "prod", kSystemId, 2), "10.0.0.1", RejectReason::SelfConnect,
         "own id"},
        {hello_payload(1, 1, "prod", kSystemId, 1), "10.0.0.1", RejectReason::VersionMismatch,
         "versions 1 to 1"},
    };
    for (const Case& k : cases) {
        SCOPED_TRACE(reject_reason_name(k.reason));
        Cluster c;
        c.peer_address = k.address;
        Handshake a = c.acceptor();
        const size_t at = 2 + 1 + k.hello[2] + 8;  // the node id follows the cluster name
        const uint16_t src = static_cast<uint16_t>(k.hello[at] | (k.hello[at + 1] << 8));
        std::vector<HandshakeOutput> out;
        feed(a, FrameType::Hello, src, k.hello, &out);
        ASSERT_TRUE(a.failed());
        EXPECT_EQ(a.reject_reason(), k.reason);
        EXPECT_EQ(reject_detail(a, out), "");
        EXPECT_NE(a.error_text().find(k.logged), std::string::npos) << a.error_text();
        EXPECT_TRUE(c.acceptor_policy.admitted.empty());
    }
}

TEST(Handshake, VersionRangeIsNegotiated) {
    Cluster c;
    Handshake a = c.acceptor();
    std::vector<HandshakeOutput> out;
    feed(a, FrameType::Hello, 1, hello_payload(1, 9, "prod", kSystemId, 1), &out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].type, FrameType::HelloReply);
    EXPECT_EQ(out[0].payload[0], 3);
}

// Settings that safety or routing rest on must be the same on both sides:
// refused after the proofs (so the detail goes to the peer), naming each
// setting that differs with both values.
TEST(Handshake, SettingsThatDifferAreRefusedByName) {
    Cluster c;
    c.acceptor_id.settings.lms_workers = 2;
    c.acceptor_id.settings.tcp_paths = 1;
    c.acceptor_id.settings.witnesses = nodes_mask({3});
    c.acceptor_id.settings.nodes_digest = 0xabc;
    c.dialer_id.settings = c.acceptor_id.settings;
    {
        Handshake d = c.dialer(), a = c.acceptor();
        run(d, a);
        ASSERT_TRUE(d.done() && a.done());
        EXPECT_EQ(d.peer().settings, c.acceptor_id.settings);
        EXPECT_EQ(a.peer().settings, c.dialer_id.settings);
    }
    c.dialer_id.settings.lms_workers = 1;
    c.dialer_id.settings.witnesses = 0;
    c.acceptor_policy.admitted.clear();
    Handshake d = c.dialer(), a = c.acceptor();
    run(d, a);
    EXPECT_TRUE(a.failed());
    EXPECT_TRUE(d.failed());
    EXPECT_EQ(a.reject_reason(), RejectReason::ConfigMismatch);
    EXPECT_EQ(d.reject_reason(), RejectReason::ConfigMismatch);
    EXPECT_NE(a.error_text().find("lms_workers is 2 here (node 2), 1 on node 1"), std::string::npos)
        << a.error_text();
    EXPECT_NE(a.error_text().find("witness_nodes is {3} here (node 2), {} on node 1"),
              std::string::npos)
        << a.error_text();
    // The dialer learns why (it proved the key).
    EXPECT_NE(d.error_text().find("config_mismatch"), std::string::npos) << d.error_text();
    EXPECT_NE(d.error_text().find("lms_workers is 2 here (node 2), 1 on node 1"), std::string::npos)
        << d.error_text();
    EXPECT_TRUE(c.acceptor_policy.admitted.empty());
    // The node lists differ: named by their digests.
    c.dialer_id.settings = c.acceptor_id.settings;
    c.dialer_id.settings.nodes_digest = 0xdef;
    Handshake d2 = c.dialer(), a2 = c.acceptor();
    run(d2, a2);
    EXPECT_EQ(a2.reject_reason(), RejectReason::ConfigMismatch);
    EXPECT_NE(a2.error_text().find("nodes differs (digest 0000000000000abc here (node 2), "
                                   "0000000000000def on node 1)"),
              std::string::npos)
        << a2.error_text();
}

TEST(Handshake, NodesDigestIgnoresOrderAndCaseButNotAddresses) {
    std::string err;
    auto a = parse_node_list("1@Db1:7400,2@db2:7400", &err);
    auto b = parse_node_list("2@db2:7400,1@db1:7400", &err);
    auto c = parse_node_list("1@db1:7400,2@db2:7401", &err);
    ASSERT_TRUE(a && b && c);
    EXPECT_EQ(cluster_nodes_digest(*a), cluster_nodes_digest(*b));
    EXPECT_NE(cluster_nodes_digest(*a), cluster_nodes_digest(*c));
}

TEST(Handshake, FramesMustComeFromTheNodeTheyClaim) {
    Cluster c;
    {
        Handshake a = c.acceptor();
        std::vector<HandshakeOutput> out;
        feed(a, FrameType::Hello, 3, hello_payload(3, 3, "prod", kSystemId, 1), &out);
        EXPECT_TRUE(a.failed());
        EXPECT_EQ(a.reject_reason(), RejectReason::Malformed);
        ASSERT_EQ(out.size(), 1u);  // no HelloReply before the Reject
        EXPECT_EQ(out[0].type, FrameType::Reject);
    }
    {
        Handshake d = c.dialer(), a = c.acceptor();
        Wire w = run(d, a, 1, 5);  // the acceptor's frames claim node 5
        EXPECT_TRUE(d.failed());
        EXPECT_EQ(d.reject_reason(), RejectReason::Malformed);
        EXPECT_NE(d.error_text().find("source node 5"), std::string::npos) << d.error_text();
    }
    {
        // A later frame on the acceptor's side from another node than the Hello's.
        Handshake d = c.dialer(), a = c.acceptor();
        std::vector<HandshakeOutput> to_a = d.start(), to_d, to_a2;
        feed(a, to_a[0].type, 1, to_a[0].payload, &to_d);
        feed(d, to_d[0].type, 2, to_d[0].payload, &to_a2);
        std::vector<HandshakeOutput> out;
        feed(a, to_a2[0].type, 3, to_a2[0].payload, &out);
        EXPECT_TRUE(a.failed());
        EXPECT_EQ(a.reject_reason(), RejectReason::Malformed);
    }
}

TEST(Handshake, LimitMismatchIsRefusedWithDetailOnceAuthenticated) {
    Cluster c;
    c.dialer_id.max_message = 131072;
    Handshake d = c.dialer(), a = c.acceptor();
    Wire w = run(d, a);
    expect_refused(a, d, RejectReason::LimitMismatch);
    const std::string detail =
        std::string(w.to_dialer.back().payload.begin() + 3, w.to_dialer.back().payload.end());
    EXPECT_NE(detail.find("131072"), std::string::npos) << detail;
    EXPECT_NE(d.error_text().find("65536"), std::string::npos) << d.error_text();

    Cluster c2;
    c2.acceptor_id.max_message = 1024;
    c2.dialer_id.max_message = 1024;
    Handshake d2 = c2.dialer(), a2 = c2.acceptor();
    run(d2, a2);
    EXPECT_TRUE(d2.done() && a2.done());
    EXPECT_EQ(d2.peer().max_message, 1024u);
}

TEST(Handshake, AdmitCanRefuseAnotherInstanceOfANode) {
    Cluster c;
    c.acceptor_policy.admit_verdict = RejectReason::DuplicateNode;
    Handshake d = c.dialer(), a = c.acceptor();
    Wire w = run(d, a);
    expect_refused(a, d, RejectReason::DuplicateNode);
    EXPECT_NE(d.error_text().find("another instance"), std::string::npos) << d.error_text();

    Cluster c2;
    c2.dialer_policy.admit_verdict = RejectReason::DuplicateNode;
    Handshake d2 = c2.dialer(), a2 = c2.acceptor();
    run(d2, a2);
    EXPECT_TRUE(d2.failed());
    EXPECT_EQ(d2.reject_reason(), RejectReason::DuplicateNode);
    EXPECT_TRUE(a2.rejected_by_peer());  // it had answered; the dialer's Reject closes
}

TEST(Handshake, DialerReachedAnotherNode) {
    Cluster c;
    c.expected_peer = 3;
    c.dialer_policy.addresses = {{3, "10.0.0.3"}};
    Handshake d = c.dialer(), a = c.acceptor();
    run(d, a, 1, 3, [](bool to_acceptor, HandshakeOutput&) { (void)to_acceptor; });
    // The acceptor (node 2) answers as node 2, in frames that claim node 3.
    EXPECT_TRUE(d.failed());
    EXPECT_EQ(d.reject_reason(), RejectReason::UnknownNode);
    EXPECT_NE(d.error_text().find("answered as node 2"), std::string::npos) << d.error_text();
}

TEST(Handshake, MalformedPayloads) {
    Cluster c;
    const Bytes good = hello_payload(3, 3, "prod", kSystemId, 1);
    for (const Bytes& bad :
         {Bytes{}, head(good, 1), concat(good, Bytes{0}), hello_payload(3, 2, "prod", kSystemId, 1),
          Builder{}.le(2, 1).le(2, 1).le(200, 1).b}) {
        Handshake a = c.acceptor();
        std::vector<HandshakeOutput> out;
        feed(a, FrameType::Hello, 1, bad, &out);
        EXPECT_TRUE(a.failed());
        EXPECT_EQ(a.reject_reason(), RejectReason::Malformed);
        EXPECT_EQ(reject_detail(a, out), "");
    }
    // A short Auth, an unknown protection mode, instance 0.
    for (int variant = 0; variant < 3; ++variant) {
        Handshake d = c.dialer(), a = c.acceptor();
        run(d, a, 1, 2, [&](bool to_acceptor, HandshakeOutput& f) {
            if (!to_acceptor || f.type != FrameType::Auth) return;
            if (variant == 0) f.payload.pop_back();
            if (variant == 1) f.payload[8 + 8 + 8 + 8 + 4 + 4] = 7;
            if (variant == 2) std::fill(f.payload.begin() + 8, f.payload.begin() + 16, 0);
        });
        EXPECT_TRUE(a.failed());
        EXPECT_EQ(a.reject_reason(), RejectReason::Malformed) << variant;
    }
}

TEST(Handshake, FramesOutOfOrder) {
    Cluster c;
    for (FrameType t : {FrameType::HelloReply, FrameType::Auth, FrameType::AuthOk,
                        FrameType::Heartbeat, FrameType::Message}) {
        Handshake a = c.acceptor();
        std::vector<HandshakeOutput> out;
        feed(a, t, 1, Bytes(40, 0), &out);
        EXPECT_TRUE(a.failed());
        EXPECT_EQ(a.reject_reason(), RejectReason::Malformed);
    }
    Handshake d = c.dialer();
    d.start();
    std::vector<HandshakeOutput> out;
    feed(d, FrameType::AuthOk, 2, Bytes(59, 0), &out);  // before the HelloReply
    EXPECT_TRUE(d.failed());
    EXPECT_EQ(d.reject_reason(), RejectReason::Malformed);
    // A failed handshake stays quiet.
    out.clear();
    feed(d, FrameType::HelloReply, 2, Bytes(33, 0), &out);
    EXPECT_TRUE(out.empty());
}

TEST(Handshake, ReplayedAuthIsRefused) {
    Cluster c;
    Handshake d1 = c.dialer(), a1 = c.acceptor();
    Wire w1 = run(d1, a1);
    ASSERT_TRUE(a1.done());
    // A recorded Hello and Auth replayed to a fresh acceptor: its new nonce
    // makes the old proof worthless.
    Handshake a2 = c.acceptor();
    std::vector<HandshakeOutput> out;
    feed(a2, FrameType::Hello, 1, w1.to_acceptor[0].payload, &out);
    ASSERT_EQ(a2.state(), Handshake::State::WaitAuth);
    out.clear();
    feed(a2, FrameType::Auth, 1, w1.to_acceptor[1].payload, &out);
    EXPECT_TRUE(a2.failed());
    EXPECT_EQ(a2.reject_reason(), RejectReason::WrongKey);
    EXPECT_FALSE(a2.done());
}

TEST(Handshake, RejectFromThePeerIsReported) {
    Cluster c;
    Handshake d = c.dialer();
    d.start();
    std::vector<HandshakeOutput> out;
    feed(d, FrameType::Reject, 2, Builder{}.le(9, 2).str("bye\x01").b, &out);
    EXPECT_TRUE(d.failed());
    EXPECT_TRUE(d.rejected_by_peer());
    EXPECT_EQ(d.reject_reason(), RejectReason::ShuttingDown);
    EXPECT_NE(d.error_text().find("\"bye\\x01\""), std::string::npos) << d.error_text();
    EXPECT_TRUE(out.empty());
    Handshake d2 = c.dialer();
    d2.start();
    feed(d2, FrameType::Reject, 2, Builder{}.le(99, 2).str("").b, &out);
    EXPECT_EQ(d2.reject_reason(), RejectReason::Malformed);
}

TEST(Handshake, DialerWithOverlongClusterNameFailsToStart) {
    Cluster c;
    c.dialer_id.cluster_name = std::string(kMaxClusterName + 1, 'x');
    Handshake d = c.dialer();
    EXPECT_TRUE(d.start().empty());
    EXPECT_TRUE(d.failed());
}

TEST(Handshake, RejectReasonNames) {
    EXPECT_STREQ(reject_reason_name(RejectReason::WrongKey), "wrong_key");
    EXPECT_STREQ(reject_reason_name(RejectReason::UnknownLane), "unknown_lane");
    EXPECT_STREQ(reject_reason_name(RejectReason::LimitMismatch), "limit_mismatch");
    EXPECT_STREQ(reject_reason_name(RejectReason::DuplicateNode), "duplicate_node");
    EXPECT_STREQ(reject_reason_name(RejectReason::Busy), "busy");
    EXPECT_STREQ(reject_reason_name(RejectReason::WrongDirection), "wrong_direction");
    EXPECT_STREQ(reject_reason_name(static_cast<RejectReason>(kMaxRejectReason + 1)), "unknown");
}

}  // namespace
}  // namespace pgrac::ic
