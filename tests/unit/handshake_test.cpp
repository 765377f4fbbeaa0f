// Handshake: full exchanges between a real dialer and acceptor, every refusal,
// and hand-built payloads that pin down the wire layout and the proofs.
#include "ic/handshake.hpp"

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
const std::string kKey = "0123456789abcdef-shared-secret";

class TestPolicy : public HandshakePolicy {
  public:
    std::map<uint16_t, std::string> addresses;  // known nodes and where they connect from
    std::map<std::pair<uint16_t, uint8_t>, uint32_t> last_seq;  // by (node, lane)

    RejectReason check_peer(uint16_t node_id, const std::string& peer_address) override {
        auto it = addresses.find(node_id);
        if (it == addresses.end()) return RejectReason::UnknownNode;
        return it->second == peer_address ? RejectReason::None : RejectReason::AddressMismatch;
    }
    uint32_t last_seq_received(uint16_t node_id, uint8_t lane) override {
        auto it = last_seq.find({node_id, lane});
        return it == last_seq.end() ? 0 : it->second;
    }
};

LocalIdentity identity(uint16_t node, uint64_t incarnation, const std::string& key = kKey) {
    LocalIdentity id;
    id.cluster_name = "prod";
    id.system_id = kSystemId;
    id.node_id = node;
    id.incarnation = incarnation;
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
                    uint16_t node, uint64_t incarnation = 7, uint32_t last_seq = 0,
                    uint8_t lane = 0) {
    return Builder{}
        .le(min_v, 1)
        .le(max_v, 1)
        .str(cluster)
        .le(sysid, 8)
        .le(node, 2)
        .le(incarnation, 8)
        .le(last_seq, 4)
        .le(lane, 1)
        .raw(Bytes(kNonceSize, 0xab))
        .b;
}

Bytes reply_body(uint8_t version, const std::string& cluster, uint64_t sysid, uint16_t node) {
    return Builder{}
        .le(version, 1)
        .str(cluster)
        .le(sysid, 8)
        .le(node, 2)
        .le(99, 8)
        .le(5, 4)
        .raw(Bytes(kNonceSize, 0xcd))
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

struct Wire {
    std::vector<HandshakeOutput> to_acceptor, to_dialer;
};

// Runs the exchange to the end; `tamper` may rewrite a frame in flight.
Wire run(Handshake& dialer, Handshake& acceptor,
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
                .on_frame(f.type, f.payload.data(), f.payload.size(), &next);
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

void feed(Handshake& h, FrameType t, const Bytes& p, std::vector<HandshakeOutput>* out) {
    h.on_frame(t, p.data(), p.size(), out);
}

// The Reject a side sent must carry its reason and its error text.
void expect_reject_frame(const Handshake& h, const std::vector<HandshakeOutput>& out) {
    ASSERT_FALSE(out.empty());
    const HandshakeOutput& r = out.back();
    ASSERT_EQ(r.type, FrameType::Reject);
    ASSERT_GE(r.payload.size(), 3u);
    EXPECT_EQ(r.payload[0] | (r.payload[1] << 8), static_cast<int>(h.reject_reason()));
    ASSERT_EQ(r.payload.size(), 3u + r.payload[2]);
    EXPECT_EQ(std::string(r.payload.begin() + 3, r.payload.end()), h.error_text().substr(0, 255));
}

// One side refused; the other received its Reject.
void expect_refused(const Handshake& refuser, const Handshake& other, RejectReason reason) {
    EXPECT_TRUE(refuser.failed());
    EXPECT_EQ(refuser.reject_reason(), reason);
    EXPECT_FALSE(refuser.rejected_by_peer());
    EXPECT_TRUE(other.failed());
    EXPECT_EQ(other.reject_reason(), reason);
    EXPECT_TRUE(other.rejected_by_peer());
    EXPECT_EQ(
        other.error_text().rfind(
            std::string("peer rejected the connection: ") + reject_reason_name(reason) + ": ", 0),
        0u)
        << other.error_text();
}

TEST(Handshake, FullExchangeFillsBothPeers) {
    Cluster c;
    c.dialer_policy.last_seq[{2, 0}] = 41;
    c.acceptor_policy.last_seq[{1, 0}] = 17;
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
    EXPECT_TRUE(w.to_dialer[1].payload.empty());

    EXPECT_EQ(d.peer().node_id, 2);
    EXPECT_EQ(d.peer().incarnation, 2002u);
    EXPECT_EQ(d.peer().last_seq_received, 17u);  // what node 2 has of node 1's messages
    EXPECT_EQ(d.peer().version, 1);
    EXPECT_EQ(a.peer().node_id, 1);
    EXPECT_EQ(a.peer().incarnation, 1001u);
    EXPECT_EQ(a.peer().last_seq_received, 41u);
    EXPECT_EQ(a.peer().version, 1);
    EXPECT_EQ(d.reject_reason(), RejectReason::None);
    EXPECT_TRUE(d.error_text().empty());
    EXPECT_TRUE(d.start().empty());  // already started
}

TEST(Handshake, FullExchangeOtherDirection) {
    Cluster c;
    std::swap(c.dialer_id, c.acceptor_id);  // node 2 dials node 1
    std::swap(c.dialer_policy, c.acceptor_policy);
    c.acceptor_policy.addresses = {{2, "10.0.0.2"}};
    c.expected_peer = 1;
    c.peer_address = "10.0.0.2";
    Handshake d = c.dialer(), a = c.acceptor();
    run(d, a);
    ASSERT_TRUE(d.done()) << d.error_text();
    ASSERT_TRUE(a.done()) << a.error_text();
    EXPECT_EQ(d.peer().node_id, 1);
    EXPECT_EQ(d.peer().incarnation, 1001u);
    EXPECT_EQ(a.peer().node_id, 2);
    EXPECT_EQ(a.peer().incarnation, 2002u);
}

TEST(Handshake, LaneTravelsInTheHelloAndSelectsTheSequenceNumbers) {
    Cluster c;
    c.lane = 3;
    c.dialer_policy.last_seq = {{{2, 0}, 1}, {{2, 3}, 41}};
    c.acceptor_policy.last_seq = {{{1, 0}, 2}, {{1, 3}, 17}};
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
}

TEST(Handshake, PeerIsEmptyUntilDone) {
    Cluster c;
    Handshake d = c.dialer(), a = c.acceptor();
    std::vector<HandshakeOutput> to_a = d.start(), to_d;
    feed(a, to_a[0].type, to_a[0].payload, &to_d);
    EXPECT_EQ(a.state(), Handshake::State::WaitAuth);
    EXPECT_EQ(a.peer().node_id, 0);
    to_a.clear();
    feed(d, to_d[0].type, to_d[0].payload, &to_a);
    EXPECT_EQ(d.state(), Handshake::State::WaitAuthOk);
    EXPECT_EQ(d.peer().node_id, 0);
}

TEST(Handshake, WireLayoutAndProofsFollowTheSpec) {
    Cluster c;
    c.dialer_policy.last_seq[{2, 0}] = 0x01020304;
    Handshake d = c.dialer(), a = c.acceptor();
    Wire w = run(d, a);
    ASSERT_TRUE(a.done());

    const Bytes& hello = w.to_acceptor[0].payload;
    ASSERT_EQ(hello.size(), 2u + 1 + 4 + 8 + 2 + 8 + 4 + 1 + kNonceSize);
    Bytes prefix = Builder{}
                       .le(1, 1)
                       .le(1, 1)
                       .str("prod")
                       .le(kSystemId, 8)
                       .le(1, 2)
                       .le(1001, 8)
                       .le(0x01020304, 4)
                       .le(0, 1)  // lane
                       .b;
    EXPECT_EQ(Bytes(hello.begin(), hello.begin() + prefix.size()), prefix);

    const Bytes& reply = w.to_dialer[0].payload;
    ASSERT_EQ(reply.size(), 1u + 1 + 4 + 8 + 2 + 8 + 4 + kNonceSize + kProofSize);
    Bytes rprefix = Builder{}.le(1, 1).str("prod").le(kSystemId, 8).le(2, 2).le(2002, 8).le(0, 4).b;
    EXPECT_EQ(Bytes(reply.begin(), reply.begin() + rprefix.size()), rprefix);
    // Nonces are fresh random bytes on each side.
    EXPECT_NE(Bytes(hello.end() - kNonceSize, hello.end()),
              Bytes(reply.end() - kProofSize - kNonceSize, reply.end() - kProofSize));

    const Bytes transcript = concat(hello, Bytes(reply.begin(), reply.end() - kProofSize));
    EXPECT_EQ(Bytes(reply.end() - kProofSize, reply.end()),
              hmac(kKey, "pgrac-ic acceptor", transcript));
    EXPECT_EQ(w.to_acceptor[1].payload, hmac(kKey, "pgrac-ic dialer", transcript));
}

TEST(Handshake, DialerDetectsWrongKey) {
    Cluster c;
    c.dialer_id = identity(1, 1001, "another-key-of-enough-length");
    Handshake d = c.dialer(), a = c.acceptor();
    Wire w = run(d, a);
    expect_refused(d, a, RejectReason::WrongKey);
    EXPECT_NE(d.error_text().find("HelloReply proof"), std::string::npos) << d.error_text();
    EXPECT_NE(d.error_text().find("peer node 2"), std::string::npos) << d.error_text();
    ASSERT_EQ(w.to_acceptor.size(), 2u);  // Hello, then the Reject instead of Auth
    EXPECT_EQ(w.to_acceptor[1].type, FrameType::Reject);
}

TEST(Handshake, AcceptorDetectsWrongKey) {
    // A dialer that passes the acceptor's proof check but signs Auth with another key.
    Cluster c;
    Handshake d = c.dialer(), a = c.acceptor();
    Bytes transcript;
    Wire w = run(d, a, [&](bool to_acceptor, HandshakeOutput& f) {
        if (f.type == FrameType::Hello) transcript = f.payload;
        if (f.type == FrameType::HelloReply)
            transcript = concat(transcript, Bytes(f.payload.begin(), f.payload.end() - kProofSize));
        if (to_acceptor && f.type == FrameType::Auth)
            f.payload = hmac("not-the-cluster-key!", "pgrac-ic dialer", transcript);
    });
    expect_refused(a, d, RejectReason::WrongKey);
    EXPECT_NE(a.error_text().find("Auth proof"), std::string::npos) << a.error_text();
    EXPECT_NE(a.error_text().find("peer node 1"), std::string::npos) << a.error_text();
    EXPECT_EQ(w.to_dialer.back().type, FrameType::Reject);
}

TEST(Handshake, WrongCluster) {
    Cluster c;
    c.dialer_id.cluster_name = "staging";
    Handshake d = c.dialer(), a = c.acceptor();
    run(d, a);
    expect_refused(a, d, RejectReason::ClusterMismatch);
    EXPECT_EQ(a.error_text(), "peer node 1 presented cluster name \"staging\", expected \"prod\"");
}

TEST(Handshake, WrongSystemId) {
    Cluster c;
    c.dialer_id.system_id = 42;
    Handshake d = c.dialer(), a = c.acceptor();
    run(d, a);
    expect_refused(a, d, RejectReason::SystemMismatch);
    EXPECT_EQ(a.error_text(), "peer node 1 presented database system identifier 42, expected " +
                                  std::to_string(kSystemId));
}

TEST(Handshake, UnknownNodeAtAcceptor) {
    Cluster c;
    c.dialer_id.node_id = 9;
    Handshake d = c.dialer(), a = c.acceptor();
    run(d, a);
    expect_refused(a, d, RejectReason::UnknownNode);
    EXPECT_EQ(a.error_text(), "peer node 9 is not in cluster.nodes");
}

TEST(Handshake, DialerReachedAnotherNode) {
    Cluster c;
    c.expected_peer = 3;  // but node 2 answers
    Handshake d = c.dialer(), a = c.acceptor();
    run(d, a);
    expect_refused(d, a, RejectReason::UnknownNode);
    EXPECT_EQ(d.error_text(), "dialed node 3 but the peer answered as node 2");
}

TEST(Handshake, AddressMismatch) {
    Cluster c;
    c.peer_address = "10.6.6.6";
    Handshake d = c.dialer(), a = c.acceptor();
    run(d, a);
    expect_refused(a, d, RejectReason::AddressMismatch);
    EXPECT_NE(a.error_text().find("peer node 1 connected from \"10.6.6.6\""), std::string::npos)
        << a.error_text();
}

TEST(Handshake, SelfConnectIsCheckedBeforeThePolicy) {
    Cluster c;
    c.dialer_id.node_id = 2;  // the acceptor's own id, which its policy does not list
    Handshake d = c.dialer(), a = c.acceptor();
    run(d, a);
    expect_refused(a, d, RejectReason::SelfConnect);
    EXPECT_EQ(a.error_text(),
              "the peer at 10.0.0.1 presented node id 2, which is this node's own id");
}

TEST(Handshake, ChecksRunInTheDocumentedOrder) {
    struct Case {
        Bytes hello;
        RejectReason want;
    } cases[] = {
        {hello_payload(5, 6, "other", 1, 2), RejectReason::VersionMismatch},
        {hello_payload(1, 1, "other", 1, 2), RejectReason::ClusterMismatch},
        {hello_payload(1, 1, "prod", 1, 2), RejectReason::SystemMismatch},
        {hello_payload(1, 1, "prod", kSystemId, 2), RejectReason::SelfConnect},
        {hello_payload(1, 1, "prod", kSystemId, 5), RejectReason::UnknownNode},
    };
    for (const Case& k : cases) {
        Cluster c;
        Handshake a = c.acceptor();
        std::vector<HandshakeOutput> out;
        feed(a, FrameType::Hello, k.hello, &out);
        EXPECT_EQ(a.reject_reason(), k.want) << a.error_text();
        expect_reject_frame(a, out);
    }
}

TEST(Handshake, VersionNegotiation) {
    Cluster c;
    Handshake a = c.acceptor();
    std::vector<HandshakeOutput> out;
    feed(a, FrameType::Hello, hello_payload(2, 3, "prod", kSystemId, 1), &out);
    EXPECT_EQ(a.reject_reason(), RejectReason::VersionMismatch);
    EXPECT_EQ(a.error_text(),
              "peer node 1 supports protocol versions 2 to 3, this node supports 1 to 1");
    expect_reject_frame(a, out);

    // A dialer offering a wider range gets the highest common version.
    Handshake a2 = c.acceptor();
    out.clear();
    feed(a2, FrameType::Hello, hello_payload(0, 200, "prod", kSystemId, 1), &out);
    ASSERT_EQ(a2.state(), Handshake::State::WaitAuth) << a2.error_text();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].payload[0], kMaxProtocolVersion);

    // A dialer refuses a version it did not offer.
    Handshake d = c.dialer();
    d.start();
    out.clear();
    feed(d, FrameType::HelloReply, concat(reply_body(2, "prod", kSystemId, 2), Bytes(32)), &out);
    EXPECT_EQ(d.reject_reason(), RejectReason::VersionMismatch);
    EXPECT_EQ(d.error_text(), "peer node 2 chose protocol version 2, this node supports 1 to 1");
    expect_reject_frame(d, out);
}

TEST(Handshake, DialerChecksTheHelloReply) {
    struct Case {
        Bytes body;
        RejectReason want;
        std::string text;
    } cases[] = {
        {reply_body(1, "qa", kSystemId, 2), RejectReason::ClusterMismatch,
         "peer node 2 presented cluster name \"qa\", expected \"prod\""},
        {reply_body(1, "prod", 7, 2), RejectReason::SystemMismatch,
         "peer node 2 presented database system identifier 7, expected " +
             std::to_string(kSystemId)},
        {reply_body(1, "prod", kSystemId, 4), RejectReason::UnknownNode,
         "dialed node 2 but the peer answered as node 4"},
        {reply_body(1, "prod", kSystemId, 2), RejectReason::WrongKey, ""},  // zero proof
    };
    for (const Case& k : cases) {
        Cluster c;
        Handshake d = c.dialer();
        d.start();
        std::vector<HandshakeOutput> out;
        feed(d, FrameType::HelloReply, concat(k.body, Bytes(kProofSize)), &out);
        EXPECT_EQ(d.reject_reason(), k.want) << d.error_text();
        if (!k.text.empty()) {
            EXPECT_EQ(d.error_text(), k.text);
        }
        expect_reject_frame(d, out);
    }
}

TEST(Handshake, HandBuiltHelloReplyWithTheRightProofIsAccepted) {
    Cluster c;
    Handshake d = c.dialer();
    const Bytes hello = d.start().at(0).payload;
    const Bytes body = reply_body(1, "prod", kSystemId, 2);
    const Bytes transcript = concat(hello, body);
    std::vector<HandshakeOutput> out;
    feed(d, FrameType::HelloReply, concat(body, hmac(kKey, "pgrac-ic acceptor", transcript)), &out);
    ASSERT_EQ(d.state(), Handshake::State::WaitAuthOk) << d.error_text();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].type, FrameType::Auth);
    EXPECT_EQ(out[0].payload, hmac(kKey, "pgrac-ic dialer", transcript));
    feed(d, FrameType::AuthOk, {}, &out);
    ASSERT_TRUE(d.done());
    EXPECT_EQ(d.peer().incarnation, 99u);
    EXPECT_EQ(d.peer().last_seq_received, 5u);
}

TEST(Handshake, MalformedHello) {
    const Bytes good = hello_payload(1, 1, "prod", kSystemId, 1);
    std::vector<Bytes> bad;
    for (size_t n = 0; n < good.size(); ++n) bad.emplace_back(good.begin(), good.begin() + n);
    bad.push_back(concat(good, {0}));
    bad.push_back(Bytes(200, 0xff));                                         // name length 255
    bad.push_back(hello_payload(1, 1, std::string(64, 'x'), kSystemId, 1));  // name too long
    bad.push_back(hello_payload(2, 1, "prod", kSystemId, 1));                // empty version range
    for (const Bytes& p : bad) {
        Cluster c;
        Handshake a = c.acceptor();
        std::vector<HandshakeOutput> out;
        feed(a, FrameType::Hello, p, &out);
        EXPECT_EQ(a.reject_reason(), RejectReason::Malformed) << p.size() << " " << a.error_text();
        EXPECT_EQ(a.error_text().rfind("malformed Hello from the peer at 10.0.0.1: ", 0), 0u)
            << a.error_text();
        expect_reject_frame(a, out);
    }
    // The longest name allowed is fine.
    Cluster c;
    c.acceptor_id.cluster_name = std::string(kMaxClusterName, 'n');
    Handshake a = c.acceptor();
    std::vector<HandshakeOutput> out;
    feed(a, FrameType::Hello, hello_payload(1, 1, c.acceptor_id.cluster_name, kSystemId, 1), &out);
    EXPECT_EQ(a.state(), Handshake::State::WaitAuth) << a.error_text();
}

TEST(Handshake, MalformedHelloReplyAuthAndAuthOk) {
    const Bytes good = concat(reply_body(1, "prod", kSystemId, 2), Bytes(kProofSize));
    std::vector<Bytes> bad;
    for (size_t n = 0; n < good.size(); ++n) bad.emplace_back(good.begin(), good.begin() + n);
    bad.push_back(concat(good, {0}));
    bad.push_back(Bytes(300, 0x7f));
    for (const Bytes& p : bad) {
        Cluster c;
        Handshake d = c.dialer();
        d.start();
        std::vector<HandshakeOutput> out;
        feed(d, FrameType::HelloReply, p, &out);
        EXPECT_EQ(d.reject_reason(), RejectReason::Malformed) << p.size() << " " << d.error_text();
        expect_reject_frame(d, out);
    }

    for (size_t n : {size_t{0}, kProofSize - 1, kProofSize + 1, size_t{1000}}) {
        Cluster c;
        Handshake d = c.dialer(), a = c.acceptor();
        std::vector<HandshakeOutput> out;
        feed(a, FrameType::Hello, d.start().at(0).payload, &out);
        out.clear();
        feed(a, FrameType::Auth, Bytes(n, 1), &out);
        EXPECT_EQ(a.reject_reason(), RejectReason::Malformed) << n;
        EXPECT_EQ(a.error_text().rfind("malformed Auth from peer node 1: ", 0), 0u)
            << a.error_text();
        expect_reject_frame(a, out);
    }

    // AuthOk carries nothing.
    Cluster c;
    Handshake d = c.dialer(), a = c.acceptor();
    run(d, a, [](bool to_acceptor, HandshakeOutput& f) {
        if (!to_acceptor && f.type == FrameType::AuthOk) f.payload = {0};
    });
    expect_refused(d, a, RejectReason::Malformed);
    EXPECT_TRUE(a.failed());  // was Done, then learned the dialer refused
}

TEST(Handshake, MalformedReject) {
    const std::vector<Bytes> bad = {
        {},
        {7},
        {7, 0},          // no detail length
        {7, 0, 3, 'a'},  // detail shorter than its length
        {7, 0, 0, 'x'},  // trailing byte
        {0, 0, 0},       // reason none
        {99, 0, 0},      // unknown reason
    };
    for (const Bytes& p : bad) {
        Cluster c;
        Handshake d = c.dialer();
        d.start();
        std::vector<HandshakeOutput> out;
        feed(d, FrameType::Reject, p, &out);
        EXPECT_EQ(d.reject_reason(), RejectReason::Malformed) << d.error_text();
        EXPECT_FALSE(d.rejected_by_peer());
        expect_reject_frame(d, out);
    }
}

TEST(Handshake, RejectDetailIsQuotedAndEscaped) {
    Cluster c;
    Handshake d = c.dialer();
    d.start();
    std::vector<HandshakeOutput> out;
    feed(d, FrameType::Reject, Builder{}.le(9, 2).str("going \"down\"\n").b, &out);
    EXPECT_TRUE(out.empty());  // no Reject in answer to a Reject
    EXPECT_TRUE(d.rejected_by_peer());
    EXPECT_EQ(d.reject_reason(), RejectReason::ShuttingDown);
    EXPECT_EQ(d.error_text(),
              "peer rejected the connection: shutting_down: \"going \\\"down\\\"\\x0a\"");
}

TEST(Handshake, FramesOutOfOrder) {
    struct Case {
        bool dialer;
        int valid_steps;  // frames of a real exchange delivered first
        FrameType type;
        std::string text;
    } cases[] = {
        {false, 0, FrameType::Auth,
         "unexpected Auth frame from the peer at 10.0.0.1 while waiting for Hello"},
        {false, 0, FrameType::HelloReply, ""},
        {false, 0, FrameType::Message, ""},
        {false, 1, FrameType::Hello,
         "unexpected Hello frame from peer node 1 while waiting for Auth"},
        {false, 2, FrameType::Auth,
         "unexpected Auth frame from peer node 1 after the handshake completed"},
        {true, -1, FrameType::HelloReply,
         "unexpected HelloReply frame from peer node 2 before sending Hello"},
        {true, 0, FrameType::AuthOk,
         "unexpected AuthOk frame from peer node 2 while waiting for HelloReply"},
        {true, 0, FrameType::Hello, ""},
        {true, 1, FrameType::HelloReply, ""},
        {true, 2, FrameType::AuthOk, ""},
        {true, 2, FrameType::Heartbeat, ""},
    };
    for (const Case& k : cases) {
        Cluster c;
        Handshake d = c.dialer(), a = c.acceptor();
        // Step the real exchange: dialer steps count HelloReply (1) and AuthOk (2),
        // acceptor steps count Hello (1) and Auth (2).
        std::vector<HandshakeOutput> to_a =
            k.valid_steps >= 0 ? d.start() : std::vector<HandshakeOutput>{};
        std::vector<HandshakeOutput> to_d;
        for (int step = 1; step <= k.valid_steps; ++step) {
            feed(a, to_a[0].type, to_a[0].payload, &to_d);
            if (!k.dialer && step == k.valid_steps) break;
            to_a.clear();
            feed(d, to_d[0].type, to_d[0].payload, &to_a);
            to_d.clear();
        }
        Handshake& h = k.dialer ? d : a;
        ASSERT_FALSE(h.failed()) << h.error_text();
        std::vector<HandshakeOutput> out;
        feed(h, k.type, Bytes(kProofSize, 0), &out);
        EXPECT_EQ(h.reject_reason(), RejectReason::Malformed) << h.error_text();
        if (!k.text.empty()) {
            EXPECT_EQ(h.error_text(), k.text);
        }
        expect_reject_frame(h, out);

        // Once failed, further frames are ignored.
        out.clear();
        feed(h, FrameType::Hello, hello_payload(1, 1, "prod", kSystemId, 1), &out);
        feed(h, FrameType::Reject, Builder{}.le(7, 2).str("x").b, &out);
        EXPECT_TRUE(out.empty());
        EXPECT_EQ(h.reject_reason(), RejectReason::Malformed);
    }
}

TEST(Handshake, ReplayedAuthIsRefused) {
    Cluster c;
    Handshake d1 = c.dialer(), a1 = c.acceptor();
    Wire first = run(d1, a1);
    ASSERT_TRUE(a1.done());

    // An eavesdropper replays the whole dialer side of the first exchange.
    Handshake a2 = c.acceptor();
    std::vector<HandshakeOutput> out;
    feed(a2, FrameType::Hello, first.to_acceptor[0].payload, &out);
    ASSERT_EQ(a2.state(), Handshake::State::WaitAuth);
    EXPECT_NE(out[0].payload, first.to_dialer[0].payload);  // a fresh nonce
    out.clear();
    feed(a2, FrameType::Auth, first.to_acceptor[1].payload, &out);
    EXPECT_EQ(a2.reject_reason(), RejectReason::WrongKey);
    expect_reject_frame(a2, out);

    // And the acceptor side, to a new dialer.
    Handshake d2 = c.dialer();
    d2.start();
    out.clear();
    feed(d2, FrameType::HelloReply, first.to_dialer[0].payload, &out);
    EXPECT_EQ(d2.reject_reason(), RejectReason::WrongKey);
    expect_reject_frame(d2, out);
}

TEST(Handshake, DialerWithOverlongClusterNameFailsToStart) {
    Cluster c;
    c.dialer_id.cluster_name = std::string(kMaxClusterName + 1, 'c');
    Handshake d = c.dialer();
    EXPECT_TRUE(d.start().empty());
    EXPECT_TRUE(d.failed());
    EXPECT_EQ(d.reject_reason(), RejectReason::ClusterMismatch);
}

TEST(Handshake, RejectReasonNames) {
    const std::map<RejectReason, std::string> names = {
        {RejectReason::None, "none"},
        {RejectReason::Malformed, "malformed"},
        {RejectReason::VersionMismatch, "version_mismatch"},
        {RejectReason::ClusterMismatch, "cluster_mismatch"},
        {RejectReason::SystemMismatch, "system_mismatch"},
        {RejectReason::UnknownNode, "unknown_node"},
        {RejectReason::AddressMismatch, "address_mismatch"},
        {RejectReason::WrongKey, "wrong_key"},
        {RejectReason::SelfConnect, "self_connect"},
        {RejectReason::ShuttingDown, "shutting_down"},
    };
    for (const auto& [r, name] : names) EXPECT_EQ(reject_reason_name(r), name);
}

}  // namespace
}  // namespace pgrac::ic
