// Connection handshake: payload codecs, the dialer and acceptor state machines,
// and loading the shared key file.
#include "ic/handshake.hpp"

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

namespace pgrac::ic {
namespace {

using Nonce = std::array<uint8_t, kNonceSize>;
using Proof = std::array<uint8_t, kProofSize>;

constexpr char kAcceptorLabel[] = "pgrac-ic acceptor";
constexpr char kDialerLabel[] = "pgrac-ic dialer";
constexpr size_t kMaxRejectDetail = 255;  // u8 length prefix
constexpr size_t kMinKeyBytes = 16;
constexpr off_t kMaxKeyFileBytes = 4096;  // a key file, not an arbitrary file

// ---- little-endian encoding

template <typename T>
void put_le(std::vector<uint8_t>& b, T v) {
    for (size_t i = 0; i < sizeof(T); ++i)
        b.push_back(static_cast<uint8_t>(uint64_t{v} >> (8 * i)));
}

void put_string(std::vector<uint8_t>& b, const std::string& s) {
    put_le<uint8_t>(b, static_cast<uint8_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
}

// Reads fields in order; the first problem is kept as a phrase for the error text.
class Reader {
  public:
    Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}

    template <typename T>
    bool le(T* v, const char* field) {
        if (!take(sizeof(T), field)) return false;
        uint64_t x = 0;
        for (size_t i = 0; i < sizeof(T); ++i) x |= uint64_t{p_[pos_ + i]} << (8 * i);
        *v = static_cast<T>(x);
        pos_ += sizeof(T);
        return true;
    }

    bool bytes(uint8_t* dst, size_t n, const char* field) {
        if (!take(n, field)) return false;
        std::memcpy(dst, p_ + pos_, n);
        pos_ += n;
        return true;
    }

    bool string(std::string* s, size_t max, const char* field) {
        uint8_t len = 0;
        if (!le(&len, field)) return false;
        if (len > max) {
            error_ = std::string("the ") + field + " is " + std::to_string(len) +
                     " bytes long, at most " + std::to_string(max) + " are allowed";
            return false;
        }
        if (!take(len, field)) return false;
        s->assign(reinterpret_cast<const char*>(p_ + pos_), len);
        pos_ += len;
        return true;
    }

    // True when every field was read and nothing follows the last one.
    bool finish() {
        if (!error_.empty()) return false;
        if (pos_ != n_) {
            error_ = std::to_string(n_ - pos_) + " unexpected bytes follow the last field";
            return false;
        }
        return true;
    }

    const std::string& error() const { return error_; }

  private:
    bool take(size_t n, const char* field) {
        if (!error_.empty()) return false;
        if (n > n_ - pos_) {
            error_ = "the payload (" + std::to_string(n_) + " bytes) ends inside the " + field;
            return false;
        }
        return true;
    }

    const uint8_t* p_;
    size_t n_;
    size_t pos_ = 0;
    std::string error_;
};

// ---- payloads

struct Hello {
    uint8_t min_version = 0;
    uint8_t max_version = 0;
    std::string cluster;
    uint64_t system_id = 0;
    uint16_t node_id = 0;
    uint64_t incarnation = 0;
    uint32_t last_seq = 0;
    uint8_t lane = 0;
    Nonce nonce{};
};

struct HelloReply {
    uint8_t version = 0;
    std::string cluster;
    uint64_t system_id = 0;
    uint16_t node_id = 0;
    uint64_t incarnation = 0;
    uint32_t last_seq = 0;
    Nonce nonce{};
    Proof proof{};
};

std::vector<uint8_t> encode_hello(const Hello& h) {
    std::vector<uint8_t> b;
    put_le(b, h.min_version);
    put_le(b, h.max_version);
    put_string(b, h.cluster);
    put_le(b, h.system_id);
    put_le(b, h.node_id);
    put_le(b, h.incarnation);
    put_le(b, h.last_seq);
    put_le(b, h.lane);
    b.insert(b.end(), h.nonce.begin(), h.nonce.end());
    return b;
}

// Everything but the proof: this part goes into the transcript.
std::vector<uint8_t> encode_hello_reply_body(const HelloReply& r) {
    std::vector<uint8_t> b;
    put_le(b, r.version);
    put_string(b, r.cluster);
    put_le(b, r.system_id);
    put_le(b, r.node_id);
    put_le(b, r.incarnation);
    put_le(b, r.last_seq);
    b.insert(b.end(), r.nonce.begin(), r.nonce.end());
    return b;
}

std::vector<uint8_t> encode_reject(RejectReason reason, const std::string& detail) {
    std::vector<uint8_t> b;
    put_le(b, static_cast<uint16_t>(reason));
    put_string(b, detail.substr(0, kMaxRejectDetail));
    return b;
}

// Each parser returns an empty string on success, else what is wrong.
std::string parse_hello(const uint8_t* p, size_t n, Hello* h) {
    Reader r(p, n);
    r.le(&h->min_version, "minimum version");
    r.le(&h->max_version, "maximum version");
    r.string(&h->cluster, kMaxClusterName, "cluster name");
    r.le(&h->system_id, "system identifier");
    r.le(&h->node_id, "node id");
    r.le(&h->incarnation, "incarnation");
    r.le(&h->last_seq, "last sequence received");
    r.le(&h->lane, "lane");
    r.bytes(h->nonce.data(), h->nonce.size(), "nonce");
    if (!r.finish()) return r.error();
    if (h->min_version > h->max_version)
        return "the version range " + std::to_string(h->min_version) + " to " +
               std::to_string(h->max_version) + " is empty";
    return {};
}

std::string parse_hello_reply(const uint8_t* p, size_t n, HelloReply* h) {
    Reader r(p, n);
    r.le(&h->version, "version");
    r.string(&h->cluster, kMaxClusterName, "cluster name");
    r.le(&h->system_id, "system identifier");
    r.le(&h->node_id, "node id");
    r.le(&h->incarnation, "incarnation");
    r.le(&h->last_seq, "last sequence received");
    r.bytes(h->nonce.data(), h->nonce.size(), "nonce");
    r.bytes(h->proof.data(), h->proof.size(), "proof");
    return r.finish() ? std::string() : r.error();
}

std::string parse_auth(const uint8_t* p, size_t n, Proof* proof) {
    Reader r(p, n);
    r.bytes(proof->data(), proof->size(), "proof");
    return r.finish() ? std::string() : r.error();
}

std::string parse_reject(const uint8_t* p, size_t n, RejectReason* reason, std::string* detail) {
    Reader r(p, n);
    uint16_t code = 0;
    r.le(&code, "reason");
    r.string(detail, kMaxRejectDetail, "detail");
    if (!r.finish()) return r.error();
    if (code == 0 || code > static_cast<uint16_t>(RejectReason::ShuttingDown))
        return "reason code " + std::to_string(code) + " is not a known reason";
    *reason = static_cast<RejectReason>(code);
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

const char* frame_name(FrameType t) {
    switch (t) {
        case FrameType::Hello:
            return "Hello";
        case FrameType::HelloReply:
            return "HelloReply";
        case FrameType::Auth:
            return "Auth";
        case FrameType::AuthOk:
            return "AuthOk";
        case FrameType::Reject:
            return "Reject";
        case FrameType::Heartbeat:
            return "Heartbeat";
        case FrameType::Ack:
            return "Ack";
        case FrameType::Message:
            return "Message";
        case FrameType::Backoff:
            return "Backoff";
    }
    return "unknown";
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
    my_nonce_ = random_nonce();
    Hello h;
    h.min_version = kMinProtocolVersion;
    h.max_version = kMaxProtocolVersion;
    h.cluster = local_.cluster_name;
    h.system_id = local_.system_id;
    h.node_id = local_.node_id;
    h.incarnation = local_.incarnation;
    h.last_seq = policy_.last_seq_received(expected_peer_, pending_.lane);
    h.lane = pending_.lane;
    h.nonce = my_nonce_;
    transcript_ = encode_hello(h);
    emit(&out, FrameType::Hello, transcript_);
    state_ = State::WaitHelloReply;
    return out;
}

void Handshake::on_frame(FrameType type, const uint8_t* payload, size_t len,
                         std::vector<HandshakeOutput>* out) {
    if (state_ == State::Failed) return;  // the connection is being closed
    if (type == FrameType::Reject) return on_reject(payload, len, out);
    if (state_ == State::WaitHello && type == FrameType::Hello) return on_hello(payload, len, out);
    if (state_ == State::WaitHelloReply && type == FrameType::HelloReply)
        return on_hello_reply(payload, len, out);
    if (state_ == State::WaitAuth && type == FrameType::Auth) return on_auth(payload, len, out);
    if (state_ == State::WaitAuthOk && type == FrameType::AuthOk) return on_auth_ok(len, out);
    fail(RejectReason::Malformed,
         std::string("unexpected ") + frame_name(type) + " frame from " + peer_name() + " " +
             state_phrase(state_),
         out);
}

std::string Handshake::peer_name() const {
    if (role_ == Role::Dialer) return "peer node " + std::to_string(expected_peer_);
    if (state_ != State::WaitHello) return "peer node " + std::to_string(pending_.node_id);
    return peer_address_.empty() ? std::string("the connecting peer")
                                 : "the peer at " + peer_address_;
}

void Handshake::on_hello(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out) {
    Hello h;
    std::string err = parse_hello(payload, len, &h);
    if (!err.empty())
        return fail(RejectReason::Malformed, "malformed Hello from " + peer_name() + ": " + err,
                    out);

    const std::string who = "peer node " + std::to_string(h.node_id);
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
                    peer_name() + " presented node id " + std::to_string(h.node_id) +
                        ", which is this node's own id",
                    out);
    const RejectReason verdict = policy_.check_peer(h.node_id, peer_address_);
    if (verdict == RejectReason::UnknownNode)
        return fail(verdict, who + " is not in cluster.nodes", out);
    if (verdict == RejectReason::AddressMismatch)
        return fail(verdict,
                    who + " connected from " + quoted(peer_address_) +
                        ", which is not its address in cluster.nodes",
                    out);
    if (verdict != RejectReason::None)
        return fail(verdict, who + " was refused: " + reject_reason_name(verdict), out);

    pending_.node_id = h.node_id;
    pending_.incarnation = h.incarnation;
    pending_.last_seq_received = h.last_seq;
    pending_.lane = h.lane;
    pending_.version = hi;

    HelloReply r;
    r.version = hi;
    r.cluster = local_.cluster_name;
    r.system_id = local_.system_id;
    r.node_id = local_.node_id;
    r.incarnation = local_.incarnation;
    r.last_seq = policy_.last_seq_received(h.node_id, h.lane);
    my_nonce_ = random_nonce();
    r.nonce = my_nonce_;
    std::vector<uint8_t> reply = encode_hello_reply_body(r);
    transcript_.assign(payload, payload + len);
    transcript_.insert(transcript_.end(), reply.begin(), reply.end());
    const Proof proof = compute_proof(local_.key, kAcceptorLabel, transcript_);
    reply.insert(reply.end(), proof.begin(), proof.end());
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
    if (r.cluster != local_.cluster_name)
        return fail(RejectReason::ClusterMismatch,
                    who + " presented cluster name " + quoted(r.cluster) + ", expected " +
                        quoted(local_.cluster_name),
                    out);
    if (r.system_id != local_.system_id)
        return fail(RejectReason::SystemMismatch,
                    who + " presented database system identifier " + std::to_string(r.system_id) +
                        ", expected " + std::to_string(local_.system_id),
                    out);
    if (r.node_id != expected_peer_)
        return fail(RejectReason::UnknownNode,
                    "dialed node " + std::to_string(expected_peer_) +
                        " but the peer answered as node " + std::to_string(r.node_id),
                    out);

    transcript_.insert(transcript_.end(), payload, payload + (len - kProofSize));
    const Proof expected = compute_proof(local_.key, kAcceptorLabel, transcript_);
    if (CRYPTO_memcmp(expected.data(), r.proof.data(), kProofSize) != 0)
        return fail(RejectReason::WrongKey,
                    who +
                        " sent a HelloReply proof that does not verify with this node's key "
                        "(cluster.auth_key_file differs)",
                    out);

    pending_.node_id = r.node_id;
    pending_.incarnation = r.incarnation;
    pending_.last_seq_received = r.last_seq;
    pending_.version = r.version;
    const Proof proof = compute_proof(local_.key, kDialerLabel, transcript_);
    emit(out, FrameType::Auth, std::vector<uint8_t>(proof.begin(), proof.end()));
    state_ = State::WaitAuthOk;
}

void Handshake::on_auth(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out) {
    Proof proof{};
    std::string err = parse_auth(payload, len, &proof);
    if (!err.empty())
        return fail(RejectReason::Malformed, "malformed Auth from " + peer_name() + ": " + err,
                    out);
    const Proof expected = compute_proof(local_.key, kDialerLabel, transcript_);
    if (CRYPTO_memcmp(expected.data(), proof.data(), kProofSize) != 0)
        return fail(RejectReason::WrongKey,
                    peer_name() +
                        " sent an Auth proof that does not verify with this node's key "
                        "(cluster.auth_key_file differs)",
                    out);
    emit(out, FrameType::AuthOk, {});
    peer_ = pending_;
    state_ = State::Done;
}

void Handshake::on_auth_ok(size_t len, std::vector<HandshakeOutput>* out) {
    if (len != 0)
        return fail(RejectReason::Malformed,
                    "malformed AuthOk from " + peer_name() + ": the payload has " +
                        std::to_string(len) + " bytes, expected none",
                    out);
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
         std::string("peer rejected the connection: ") + reject_reason_name(reason) + ": " +
             quoted(detail),
         nullptr);
}

void Handshake::fail(RejectReason r, std::string text, std::vector<HandshakeOutput>* out) {
    state_ = State::Failed;
    reason_ = r;
    error_ = std::move(text);
    emit(out, FrameType::Reject, encode_reject(r, error_));
}

std::optional<std::vector<uint8_t>> load_key_file(const std::string& path, std::string* error) {
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
    return key;
}

}  // namespace pgrac::ic
