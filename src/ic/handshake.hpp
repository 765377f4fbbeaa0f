// Connection handshake with mutual HMAC-SHA256 challenge/response.
//
//   dialer                                    acceptor
//   Hello{versions, cluster, sysid, node, incarnation, last_seq, lane, nonce_d} ->
//            <- HelloReply{version, cluster, sysid, node, incarnation, last_seq, nonce_a, proof_a}
//   Auth{proof_d} ->
//            <- AuthOk{}                        (or Reject{reason, detail} at any step)
//
//   proof_a = HMAC(key, "pgrac-ic acceptor" || transcript)
//   proof_d = HMAC(key, "pgrac-ic dialer"   || transcript)
//   transcript = Hello payload || HelloReply payload without its proof
// Each side proves the key over both fresh nonces, so neither proof can be replayed.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ic/frame.hpp"

namespace pgrac::ic {

inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kProofSize = 32;  // HMAC-SHA256
inline constexpr size_t kMaxClusterName = 63;
inline constexpr uint8_t kMinProtocolVersion = 1;
inline constexpr uint8_t kMaxProtocolVersion = 1;

enum class RejectReason : uint16_t {
    None = 0,
    Malformed = 1,        // a handshake frame did not parse or came out of order
    VersionMismatch = 2,  // no common protocol version
    ClusterMismatch = 3,  // another cluster.name
    SystemMismatch = 4,   // another database system identifier
    UnknownNode = 5,      // node id not in cluster.nodes
    AddressMismatch = 6,  // connection from an address other than the node's
    WrongKey = 7,         // proof did not verify
    SelfConnect = 8,      // the peer claims our own node id
    ShuttingDown = 9,
};
// Stable lower-case name, e.g. "wrong_key".
const char* reject_reason_name(RejectReason r);

struct LocalIdentity {
    std::string cluster_name;
    uint64_t system_id = 0;
    uint16_t node_id = 0;
    uint64_t incarnation = 0;
    std::vector<uint8_t> key;  // shared secret from cluster.auth_key_file
};

struct PeerIdentity {
    uint16_t node_id = 0;
    uint64_t incarnation = 0;
    uint32_t last_seq_received = 0;  // what the peer has of our messages
    uint8_t version = 0;             // negotiated protocol version
    uint8_t lane = 0;                // which of the pair's connections this is (0 = control)
};

// What the handshake asks of its owner (the engine).
class HandshakePolicy {
  public:
    virtual ~HandshakePolicy() = default;
    // Acceptor side: may node_id connect from peer_address ("host" form)?
    virtual RejectReason check_peer(uint16_t node_id, const std::string& peer_address) = 0;
    // Last sequence number received in order from node_id on `lane` (0 if none).
    virtual uint32_t last_seq_received(uint16_t node_id, uint8_t lane) = 0;
};

struct HandshakeOutput {
    FrameType type;
    std::vector<uint8_t> payload;
};

class Handshake {
  public:
    enum class Role { Dialer, Acceptor };
    enum class State { Start, WaitHelloReply, WaitHello, WaitAuth, WaitAuthOk, Done, Failed };

    // A dialer names the node it expects to reach; an acceptor passes 0.
    Handshake(Role role, const LocalIdentity& local, HandshakePolicy& policy,
              uint16_t expected_peer = 0, std::string peer_address = {}, uint8_t lane = 0);

    // Dialer: produce the Hello. Acceptor: nothing to do (returns empty).
    std::vector<HandshakeOutput> start();
    // Feed a handshake frame (Hello..Reject). Frames to send back are appended to out.
    void on_frame(FrameType type, const uint8_t* payload, size_t len,
                  std::vector<HandshakeOutput>* out);

    State state() const { return state_; }
    bool done() const { return state_ == State::Done; }
    bool failed() const { return state_ == State::Failed; }
    const PeerIdentity& peer() const { return peer_; }
    RejectReason reject_reason() const { return reason_; }
    // True when the peer rejected us (its Reject frame), false when we rejected it.
    bool rejected_by_peer() const { return rejected_by_peer_; }
    const std::string& error_text() const { return error_; }

  private:
    void fail(RejectReason r, std::string text, std::vector<HandshakeOutput>* out);
    void on_hello(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out);
    void on_hello_reply(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out);
    void on_auth(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out);
    void on_auth_ok(size_t len, std::vector<HandshakeOutput>* out);
    void on_reject(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out);
    // How error texts name the other side, as far as it is known in this state.
    std::string peer_name() const;

    Role role_;
    const LocalIdentity& local_;
    HandshakePolicy& policy_;
    uint16_t expected_peer_;
    std::string peer_address_;
    State state_;
    PeerIdentity peer_;
    PeerIdentity pending_;  // learned from Hello/HelloReply; becomes peer_ on Done
    RejectReason reason_ = RejectReason::None;
    bool rejected_by_peer_ = false;
    std::string error_;
    std::array<uint8_t, kNonceSize> my_nonce_{};
    std::vector<uint8_t> transcript_;
};

// Loads the shared key. Refuses a file that group or others may read, a missing
// file, or a key shorter than 16 bytes; trailing whitespace is ignored.
std::optional<std::vector<uint8_t>> load_key_file(const std::string& path, std::string* error);

}  // namespace pgrac::ic
