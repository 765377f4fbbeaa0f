// Connection handshake: payload codecs, the dialer and acceptor state machines,
// and loading the shared key file.
#include "ic/session/handshake.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "ic/wire/codec.hpp"

namespace pgrac::ic {
namespace {

using Nonce = std::array<uint8_t, kNonceSize>;
using Proof = std::array<uint8_t, kProofSize>;

constexpr char kAcceptorLabel[] = "pgrac-ic v2 acceptor";
constexpr char kDialerLabel[] = "pgrac-ic v2 dialer";
constexpr char kKeysLabel[] = "pgrac-ic v2 session keys";
constexpr size_t kMaxRejectDetail = 255;  // u8 length prefix
constexpr size_t kMinKeyBytes = 16;
constexpr off_t kMaxKeyFileBytes = 4096;  // a key file, not an arbitrary file

// ---- payloads (docs/protocol.md, "Handshake"); ic/wire/codec.hpp encodes them

struct Hello {
    uint8_t min_version = 0;
    uint8_t max_version = 0;
    std::string cluster;
    uint64_t system_id = 0;
    uint16_t node_id = 0;
    uint8_t lane = 0;
    Nonce nonce{};

    template <class C, class S>
    static void fields(C& c, S& s) {
        c.le(s.min_version, "minimum version");
        c.le(s.max_version, "maximum version");
        c.str8(s.cluster, kMaxClusterName, "cluster name");
        c.le(s.system_id, "system identifier");
        c.le(s.node_id, "node id");
        c.le(s.lane, "lane");
        c.fixed(s.nonce, "nonce");
    }
};

struct HelloReply {
    uint8_t version = 0;
    Nonce nonce{};

    template <class C, class S>
    static void fields(C& c, S& s) {
        c.le(s.version, "version");
        c.fixed(s.nonce, "nonce");
    }
};

// Auth (dialer) and AuthOk (acceptor) carry the same session fields; AuthOk
// starts with the acceptor's node id. The body (all but the proof) goes into
// the transcript; the proof follows it.
struct Offer {
    bool with_node = false;  // AuthOk: not a field, says which of the two this is
    uint16_t node_id = 0;
    uint64_t incarnation = 0;
    uint64_t instance = 0;
    uint64_t location = 0;
    uint64_t session_id = 0;
    uint32_t last_seq = 0;
    uint32_t max_message = 0;
    uint8_t protection = 0;
    ClusterSettings settings{};
    Proof proof{};

    template <class C, class S>
    static void body(C& c, S& s) {
        if (s.with_node) c.le(s.node_id, "node id");
        c.le(s.incarnation, "incarnation");
        c.le(s.instance, "instance");
        c.le(s.location, "location");
        c.le(s.session_id, "session id");
        c.le(s.last_seq, "last sequence received");
        c.le(s.max_message, "largest message");
        c.le(s.protection, "wire protection");
        c.le(s.settings.lms_workers, "lms_workers");
        c.le(s.settings.tcp_paths, "tcp_paths");
        c.le(s.settings.witnesses, "witness_nodes");
        c.le(s.settings.nodes_digest, "nodes digest");
    }
    template <class C, class S>
    static void fields(C& c, S& s) {
        body(c, s);
        c.fixed(s.proof, "proof");
    }
};

struct Reject {
    uint16_t code = 0;
    std::string detail;

    template <class C, class S>
    static void fields(C& c, S& s) {
        c.le(s.code, "reason");
        c.str8(s.detail, kMaxRejectDetail, "detail");
    }
};

std::vector<uint8_t> encode_offer_body(const Offer& o) {
    std::vector<uint8_t> b;
    codec::Writer w(&b);
    Offer::body(w, o);
    return b;
}

// Each parser returns an empty string on success, else what is wrong.
std::string parse_hello(const uint8_t* p, size_t n, Hello* h) {
    std::string err;
    if (!codec::decode(p, n, h, &err)) return err;
    if (h->min_version > h->max_version)
        return "the version range " + std::to_string(h->min_version) + " to " +
               std::to_string(h->max_version) + " is empty";
    return {};
}

std::string parse_hello_reply(const uint8_t* p, size_t n, HelloReply* h) {
    std::string err;
    return codec::decode(p, n, h, &err) ? std::string() : err;
}

std::string parse_offer(const uint8_t* p, size_t n, bool with_node, Offer* o) {
    std::string err;
    o->with_node = with_node;
    if (!codec::decode(p, n, o, &err)) return err;
    if (o->protection > kMaxWireProtection)
        return "wire protection " + std::to_string(o->protection) + " is not a known mode";
    if (o->instance == 0) return "instance 0 is not an instance";
    return {};
}

std::string parse_reject(const uint8_t* p, size_t n, RejectReason* reason, std::string* detail) {
    Reject r;
    std::string err;
    if (!codec::decode(p, n, &r, &err)) return err;
    if (r.code == 0 || r.code > kMaxRejectReason)
        return "reason code " + std::to_string(r.code) + " is not a known reason";
    *reason = static_cast<RejectReason>(r.code);
    *detail = std::move(r.detail);
    return {};
}

// ---- crypto

Proof compute_proof(const std::vector<uint8_t>& key, const char* label,
                    const std::vector<uint8_t>& transcript) {
    std::vector<uint8_t> msg(label, label + std::strlen(label));
    msg.insert(msg.end(), transcript.begin(), transcript.end());
    static const uint8_t kNoKey = 0;  // HMAC() wants a valid pointer even for an empty key
    Proof proof{};
    unsigned int len = 0;
    if (HMAC(EVP_sha256(), key.empty() ? &kNoKey : key.data(), static_cast<int>(key.size()),
             msg.data(), msg.size(), proof.data(), &len) == nullptr ||
        len != proof.size())
        throw std::runtime_error("HMAC-SHA256 failed while computing a handshake proof");
    return proof;
}

// No randomness means no safe handshake at all: this is not a peer's fault.
Nonce random_nonce() {
    Nonce n{};
    if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
        throw std::runtime_error("RAND_bytes failed while generating a handshake nonce");
    return n;
}

// ---- text

// Peer-supplied bytes go into logs: quote them and escape anything unprintable.
std::string quoted(const std::string& s) {
    std::string q = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            q += '\\';
            q += static_cast<char>(c);
        } else if (c >= 0x20 && c < 0x7f) {
            q += static_cast<char>(c);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            q += buf;
        }
    }
    return q + "\"";
}

const char* state_phrase(Handshake::State s) {
    switch (s) {
        case Handshake::State::Start:
            return "before sending Hello";
        case Handshake::State::WaitHelloReply:
            return "while waiting for HelloReply";
        case Handshake::State::WaitHello:
            return "while waiting for Hello";
        case Handshake::State::WaitAuth:
            return "while waiting for Auth";
        case Handshake::State::WaitAuthOk:
            return "while waiting for AuthOk";
        case Handshake::State::Done:
            return "after the handshake completed";
        case Handshake::State::Failed:
            return "after the handshake failed";
    }
    return "in an unknown state";
}

std::string version_range(unsigned lo, unsigned hi) {
    return std::to_string(lo) + " to " + std::to_string(hi);
}

bool is_space(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

std::string errno_text(int err) {
    return std::generic_category().message(err);
}

void emit(std::vector<HandshakeOutput>* out, FrameType type, std::vector<uint8_t> payload) {
    if (out != nullptr) out->push_back(HandshakeOutput{type, std::move(payload)});
}

}  // namespace

const char* reject_reason_name(RejectReason r) {
    switch (r) {
        case RejectReason::None:
            return "none";
        case RejectReason::Malformed:
            return "malformed";
        case RejectReason::VersionMismatch:
            return "version_mismatch";
        case RejectReason::ClusterMismatch:
            return "cluster_mismatch";
        case RejectReason::SystemMismatch:
            return "system_mismatch";
        case RejectReason::UnknownNode:
            return "unknown_node";
        case RejectReason::AddressMismatch:
            return "address_mismatch";
        case RejectReason::WrongKey:
            return "wrong_key";
        case RejectReason::SelfConnect:
            return "self_connect";
        case RejectReason::ShuttingDown:
            return "shutting_down";
        case RejectReason::UnknownLane:
            return "unknown_lane";
        case RejectReason::LimitMismatch:
            return "limit_mismatch";
        case RejectReason::DuplicateNode:
            return "duplicate_node";
        case RejectReason::Busy:
            return "busy";
        case RejectReason::WrongDirection:
            return "wrong_direction";
        case RejectReason::ConfigMismatch:
            return "config_mismatch";
    }
    return "unknown";
}

Handshake::Handshake(Role role, const LocalIdentity& local, HandshakePolicy& policy,
                     uint16_t expected_peer, std::string peer_address, uint8_t lane)
    : role_(role),
      local_(local),
      policy_(policy),
      expected_peer_(expected_peer),
      peer_address_(std::move(peer_address)),
      state_(role == Role::Dialer ? State::Start : State::WaitHello) {
    pending_.lane = lane;
}

std::vector<HandshakeOutput> Handshake::start() {
    std::vector<HandshakeOutput> out;
    if (role_ != Role::Dialer || state_ != State::Start) return out;
    if (local_.cluster_name.size() > kMaxClusterName) {
        fail(RejectReason::ClusterMismatch,
             "this node's cluster name is " + std::to_string(local_.cluster_name.size()) +
                 " bytes long, at most " + std::to_string(kMaxClusterName) + " are allowed",
             nullptr);
        return out;
    }
    nonce_d_ = random_nonce();
    Hello h;
    h.min_version = kMinProtocolVersion;
    h.max_version = kMaxProtocolVersion;
    h.cluster = local_.cluster_name;
    h.system_id = local_.system_id;
    h.node_id = local_.node_id;
    h.lane = pending_.lane;
    h.nonce = nonce_d_;
    transcript_ = codec::encode(h);
    emit(&out, FrameType::Hello, transcript_);
    state_ = State::WaitHelloReply;
    return out;
}

void Handshake::on_frame(FrameType type, uint16_t src_node, const uint8_t* payload, size_t len,
                         std::vector<HandshakeOutput>* out) {
    if (state_ == State::Failed) return;  // the connection is being closed
    // Every frame names its sender: the dialed node, or the node the Hello claimed.
    const uint16_t sender = role_ == Role::Dialer ? expected_peer_ : claimed_;
    if (sender != 0 && src_node != sender)
        return fail(RejectReason::Malformed,
                    std::string(frame_type_name(type)) + " frame from " + peer_name() +
                        " claims source node " + std::to_string(src_node),
                    out);
    if (type == FrameType::Reject) return on_reject(payload, len, out);
    if (state_ == State::WaitHello && type == FrameType::Hello) {
        frame_src_ = src_node;
        return on_hello(payload, len, out);
    }
    if (state_ == State::WaitHelloReply && type == FrameType::HelloReply)
        return on_hello_reply(payload, len, out);
    if (state_ == State::WaitAuth && type == FrameType::Auth) return on_auth(payload, len, out);
    if (state_ == State::WaitAuthOk && type == FrameType::AuthOk)
        return on_auth_ok(payload, len, out);
    fail(RejectReason::Malformed,
         std::string("unexpected ") + frame_type_name(type) + " frame from " + peer_name() + " " +
             state_phrase(state_),
         out);
}

std::string Handshake::peer_name() const {
    if (role_ == Role::Dialer) return "peer node " + std::to_string(expected_peer_);
    if (claimed_ != 0)
        return "peer node " + std::to_string(claimed_) +
               (peer_address_.empty() ? std::string() : " at " + peer_address_);
    return peer_address_.empty() ? std::string("the connecting peer")
                                 : "the peer at " + peer_address_;
}

void Handshake::on_hello(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out) {
    Hello h;
    std::string err = parse_hello(payload, len, &h);
    if (!err.empty())
        return fail(RejectReason::Malformed, "malformed Hello from " + peer_name() + ": " + err,
                    out);
    // Nothing below is proven yet: refusals name their reason and nothing of
    // this node's configuration (fail() sends no detail before the proof).
    const std::string who = peer_name() + " (claims node " + std::to_string(h.node_id) + ")";
    if (h.node_id != frame_src_)
        return fail(RejectReason::Malformed,
                    who + " sent its Hello in a frame from node " + std::to_string(frame_src_),
                    out);
    const uint8_t lo = std::max(h.min_version, kMinProtocolVersion);
    const uint8_t hi = std::min(h.max_version, kMaxProtocolVersion);
    if (lo > hi)
        return fail(RejectReason::VersionMismatch,
                    who + " supports protocol versions " +
                        version_range(h.min_version, h.max_version) + ", this node supports " +
                        version_range(kMinProtocolVersion, kMaxProtocolVersion),
                    out);
    if (h.cluster != local_.cluster_name)
        return fail(RejectReason::ClusterMismatch,
                    who + " presented cluster name " + quoted(h.cluster) + ", expected " +
                        quoted(local_.cluster_name),
                    out);
    if (h.system_id != local_.system_id)
        return fail(RejectReason::SystemMismatch,
                    who + " presented database system identifier " + std::to_string(h.system_id) +
                        ", expected " + std::to_string(local_.system_id),
                    out);
    if (h.node_id == local_.node_id)
        return fail(RejectReason::SelfConnect,
                    who + " presented this node's own id " + std::to_string(h.node_id), out);
    const RejectReason verdict = policy_.check_peer(h.node_id, peer_address_, h.lane);
    if (verdict == RejectReason::UnknownNode)
        return fail(verdict,
                    who + ": node " + std::to_string(h.node_id) + " is not in cluster.nodes", out);
    if (verdict == RejectReason::AddressMismatch)
        return fail(verdict,
                    who + " connected from " + quoted(peer_address_) +
                        ", which is not its address in cluster.nodes",
                    out);
    if (verdict == RejectReason::WrongDirection)
        return fail(verdict,
                    who + " dialed, but this node has the lower id and dials node " +
                        std::to_string(h.node_id) + " itself",
                    out);
    if (verdict == RejectReason::UnknownLane)
        return fail(verdict,
                    who + " asked for lane " + std::to_string(h.lane) +
                        ", which this cluster does not have (cluster.tcp_paths)",
                    out);
    if (verdict != RejectReason::None)
        return fail(verdict, who + " was refused: " + reject_reason_name(verdict), out);

    claimed_ = h.node_id;
    pending_.node_id = h.node_id;
    pending_.lane = h.lane;
    pending_.version = hi;
    nonce_d_ = h.nonce;
    nonce_a_ = random_nonce();
    HelloReply r;
    r.version = hi;
    r.nonce = nonce_a_;
    std::vector<uint8_t> reply = codec::encode(r);
    transcript_.assign(payload, payload + len);
    transcript_.insert(transcript_.end(), reply.begin(), reply.end());
    emit(out, FrameType::HelloReply, std::move(reply));
    state_ = State::WaitAuth;
}

void Handshake::on_hello_reply(const uint8_t* payload, size_t len,
                               std::vector<HandshakeOutput>* out) {
    HelloReply r;
    std::string err = parse_hello_reply(payload, len, &r);
    const std::string who = peer_name();
    if (!err.empty())
        return fail(RejectReason::Malformed, "malformed HelloReply from " + who + ": " + err, out);
    if (r.version < kMinProtocolVersion || r.version > kMaxProtocolVersion)
        return fail(RejectReason::VersionMismatch,
                    who + " chose protocol version " + std::to_string(r.version) +
                        ", this node supports " +
                        version_range(kMinProtocolVersion, kMaxProtocolVersion),
                    out);
    transcript_.insert(transcript_.end(), payload, payload + len);
    nonce_a_ = r.nonce;
    pending_.version = r.version;

    const LaneState mine = policy_.lane_state(expected_peer_, pending_.lane);
    Offer o;
    o.incarnation = local_.incarnation;
    o.instance = local_.instance;
    o.location = local_.location;
    o.session_id = mine.session_id;
    o.last_seq = mine.last_seq_received;
    o.max_message = local_.max_message;
    o.protection = static_cast<uint8_t>(local_.protection);
    o.settings = local_.settings;
    pending_.offered_session = mine.session_id;
    std::vector<uint8_t> auth = encode_offer_body(o);
    transcript_.insert(transcript_.end(), auth.begin(), auth.end());
    const Proof proof = compute_proof(local_.key, kDialerLabel, transcript_);
    transcript_.insert(transcript_.end(), proof.begin(), proof.end());
    auth.insert(auth.end(), proof.begin(), proof.end());
    emit(out, FrameType::Auth, std::move(auth));
    state_ = State::WaitAuthOk;
}

void Handshake::on_auth(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out) {
    Offer d;
    std::string err = parse_offer(payload, len, false, &d);
    if (!err.empty())
        return fail(RejectReason::Malformed, "malformed Auth from " + peer_name() + ": " + err,
                    out);
    transcript_.insert(transcript_.end(), payload, payload + (len - kProofSize));
    const Proof expected = compute_proof(local_.key, kDialerLabel, transcript_);
    if (CRYPTO_memcmp(expected.data(), d.proof.data(), kProofSize) != 0)
        return fail(RejectReason::WrongKey,
                    peer_name() +
                        " sent an Auth proof that does not verify with this node's key "
                        "(cluster.auth_key_file differs)",
                    out);
    peer_authenticated_ = true;
    transcript_.insert(transcript_.end(), d.proof.begin(), d.proof.end());
    if (!admit_peer(pending_.node_id, d.max_message, d.settings, d.incarnation, d.instance,
                    d.location, out))
        return;

    const LaneState mine = policy_.lane_state(pending_.node_id, pending_.lane);
    pending_.incarnation = d.incarnation;
    pending_.instance = d.instance;
    pending_.location = d.location;
    pending_.last_seq_received = d.last_seq;
    pending_.max_message = d.max_message;
    pending_.settings = d.settings;
    pending_.protection = static_cast<WireProtection>(
        std::max(d.protection, static_cast<uint8_t>(local_.protection)));
    pending_.offered_session = mine.session_id;

    Offer a;
    a.node_id = local_.node_id;
    a.incarnation = local_.incarnation;
    a.instance = local_.instance;
    a.location = local_.location;
    a.session_id = mine.session_id;
    a.last_seq = mine.last_seq_received;
    a.max_message = local_.max_message;
    a.protection = static_cast<uint8_t>(pending_.protection);
    a.settings = local_.settings;
    a.with_node = true;
    std::vector<uint8_t> ok = encode_offer_body(a);
    transcript_.insert(transcript_.end(), ok.begin(), ok.end());
    const Proof proof = compute_proof(local_.key, kAcceptorLabel, transcript_);
    transcript_.insert(transcript_.end(), proof.begin(), proof.end());
    ok.insert(ok.end(), proof.begin(), proof.end());
    emit(out, FrameType::AuthOk, std::move(ok));
    finish(d.session_id, a.session_id);
}

void Handshake::on_auth_ok(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out) {
    Offer a;
    std::string err = parse_offer(payload, len, true, &a);
    const std::string who = peer_name();
    if (!err.empty())
        return fail(RejectReason::Malformed, "malformed AuthOk from " + who + ": " + err, out);
    transcript_.insert(transcript_.end(), payload, payload + (len - kProofSize));
    const Proof expected = compute_proof(local_.key, kAcceptorLabel, transcript_);
    if (CRYPTO_memcmp(expected.data(), a.proof.data(), kProofSize) != 0)
        return fail(RejectReason::WrongKey,
                    who +
                        " sent an AuthOk proof that does not verify with this node's key "
                        "(cluster.auth_key_file differs)",
                    out);
    peer_authenticated_ = true;
    transcript_.insert(transcript_.end(), a.proof.begin(), a.proof.end());
    if (a.node_id != expected_peer_)
        return fail(RejectReason::UnknownNode,
                    "dialed node " + std::to_string(expected_peer_) +
                        " but the peer answered as node " + std::to_string(a.node_id),
                    out);
    if (a.protection < static_cast<uint8_t>(local_.protection))
        return fail(RejectReason::Malformed,
                    who + " chose wire protection " +
                        wire_protection_name(static_cast<WireProtection>(a.protection)) +
                        ", weaker than this node's " + wire_protection_name(local_.protection),
                    out);
    if (!admit_peer(expected_peer_, a.max_message, a.settings, a.incarnation, a.instance,
                    a.location, out))
        return;
    pending_.node_id = a.node_id;
    pending_.settings = a.settings;
    pending_.incarnation = a.incarnation;
    pending_.instance = a.instance;
    pending_.location = a.location;
    pending_.last_seq_received = a.last_seq;
    pending_.max_message = a.max_message;
    pending_.protection = static_cast<WireProtection>(a.protection);
    finish(pending_.offered_session, a.session_id);
}

// Checks, on either side, that the authenticated peer can have a session:
// the same largest message, the same settings that safety and routing rest
// on, and its owner admits this instance of the node.
bool Handshake::admit_peer(uint16_t node, uint32_t max_message, const ClusterSettings& settings,
                           uint64_t incarnation, uint64_t instance, uint64_t location,
                           std::vector<HandshakeOutput>* out) {
    if (max_message != local_.max_message) {
        fail(RejectReason::LimitMismatch,
             peer_name() + " carries messages of up to " + std::to_string(max_message) +
                 " bytes, this node up to " + std::to_string(local_.max_message) +
                 " (PGRAC_IC_MAX_MESSAGE): build every node alike",
             out);
        return false;
    }
    const std::string differs = settings_mismatch(local_.settings, settings, local_.node_id, node);
    if (!differs.empty()) {
        fail(RejectReason::ConfigMismatch, differs + ": every node must have the same values", out);
        return false;
    }
    std::string why;
    const RejectReason admitted =
        policy_.admit(node, incarnation, instance, location, pending_.lane, &why);
    if (admitted == RejectReason::None) return true;
    fail(admitted, why, out);
    return false;
}

// Both sides hold the same transcript now. A lane whose two sides offered the
// same session continues it; otherwise both start a new one (the condition is
// the same on both sides, so they never disagree about a reset). Two sides
// that never had a session keep their pristine ones under the new id.
void Handshake::finish(uint64_t dialer_session, uint64_t acceptor_session) {
    std::vector<uint8_t> ikm = local_.key;
    std::vector<uint8_t> salt(nonce_d_.begin(), nonce_d_.end());
    salt.insert(salt.end(), nonce_a_.begin(), nonce_a_.end());
    std::vector<uint8_t> info(kKeysLabel, kKeysLabel + sizeof kKeysLabel - 1);
    uint8_t digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (EVP_Digest(transcript_.data(), transcript_.size(), digest, &dlen, EVP_sha256(), nullptr) !=
        1)
        throw std::runtime_error("SHA-256 failed while deriving session keys");
    info.insert(info.end(), digest, digest + dlen);
    std::vector<uint8_t> okm = hkdf_sha256(ikm, salt, info, 2 * kSessionKeySize + 8);
    const uint8_t* d2a = okm.data();
    const uint8_t* a2d = okm.data() + kSessionKeySize;
    const bool dialer = role_ == Role::Dialer;
    std::memcpy(pending_.keys.send.data(), dialer ? d2a : a2d, kSessionKeySize);
    std::memcpy(pending_.keys.recv.data(), dialer ? a2d : d2a, kSessionKeySize);
    uint64_t fresh = 0;
    for (int i = 0; i < 8; ++i) fresh |= uint64_t{okm[2 * kSessionKeySize + i]} << (8 * i);
    if (fresh == 0) fresh = 1;
    OPENSSL_cleanse(okm.data(), okm.size());
    OPENSSL_cleanse(ikm.data(), ikm.size());
    if (dialer_session == acceptor_session && dialer_session != 0) {
        pending_.session_id = dialer_session;
        pending_.new_session = false;
    } else {
        pending_.session_id = fresh;
        // Both pristine: nothing was ever exchanged on the lane, nothing to reset.
        pending_.new_session = !(dialer_session == 0 && acceptor_session == 0);
    }
    peer_ = pending_;
    state_ = State::Done;
}

void Handshake::on_reject(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out) {
    RejectReason reason = RejectReason::None;
    std::string detail;
    std::string err = parse_reject(payload, len, &reason, &detail);
    if (!err.empty())
        return fail(RejectReason::Malformed, "malformed Reject from " + peer_name() + ": " + err,
                    out);
    rejected_by_peer_ = true;
    // The peer is closing: there is no one to send our own Reject to.
    fail(reason,
         peer_name() + " rejected the connection: " + reject_reason_name(reason) +
             (detail.empty() ? std::string() : ": " + quoted(detail)),
         nullptr);
}

void Handshake::fail(RejectReason r, std::string text, std::vector<HandshakeOutput>* out) {
    state_ = State::Failed;
    reason_ = r;
    error_ = std::move(text);
    // An unauthenticated peer learns the reason code and nothing else.
    emit(out, FrameType::Reject,
         codec::encode(
             Reject{static_cast<uint16_t>(r), peer_authenticated_ ? error_ : std::string()}));
}

std::optional<std::vector<uint8_t>> load_key_file(const std::string& path, std::string* error,
                                                  std::string* warning) {
    auto refuse = [&](std::string msg) -> std::optional<std::vector<uint8_t>> {
        if (error != nullptr) *error = std::move(msg);
        return std::nullopt;
    };
    const std::string name = "key file \"" + path + "\"";
    // O_NONBLOCK: opening a FIFO must not hang; fstat then refuses it.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) return refuse("could not open " + name + ": " + errno_text(errno));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};

    struct stat st;
    if (::fstat(fd, &st) != 0) return refuse("could not stat " + name + ": " + errno_text(errno));
    if (!S_ISREG(st.st_mode)) return refuse(name + " is not a regular file");
    if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        return refuse(name + " has mode " + mode +
                      ", which lets group or others access it; the mode must be 0600 "
                      "(chmod 0600 " +
                      path + ")");
    }
    if (st.st_size > kMaxKeyFileBytes)
        return refuse(name + " is " + std::to_string(st.st_size) + " bytes long, more than the " +
                      std::to_string(kMaxKeyFileBytes) + " a key file may hold");

    std::vector<uint8_t> key(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < key.size()) {
        const ssize_t n = ::read(fd, key.data() + got, key.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int err = errno;
            OPENSSL_cleanse(key.data(), key.size());
            return refuse("could not read " + name + ": " + errno_text(err));
        }
        if (n == 0) break;  // the file shrank since fstat
        got += static_cast<size_t>(n);
    }
    while (got > 0 && is_space(key[got - 1])) --got;
    if (got < kMinKeyBytes) {
        OPENSSL_cleanse(key.data(), key.size());
        return refuse(name + " holds " + std::to_string(got) +
                      " bytes of key after trailing whitespace is stripped; at least " +
                      std::to_string(kMinKeyBytes) + " are required");
    }
    key.resize(got);
    // Not a proof of randomness, but a key of few distinct bytes is a
    // password, not a random key (hex output has 16, base64 up to 64).
    bool seen[256] = {};
    int distinct = 0;
    for (uint8_t b : key) distinct += seen[b] ? 0 : 1, seen[b] = true;
    const std::string advice = " (e.g. openssl rand -base64 48 > " + path +
                               "): a weak key can be guessed offline from a recorded handshake";
    if (warning != nullptr && got < kRecommendedKeyBytes)
        *warning = name + " holds " + std::to_string(got) + " bytes of key; use at least " +
                   std::to_string(kRecommendedKeyBytes) + " random bytes" + advice;
    else if (warning != nullptr && distinct < 12)
        *warning = name + " holds only " + std::to_string(distinct) +
                   " distinct byte values: it does not look random; use random bytes" + advice;
    return key;
}

}  // namespace pgrac::ic
