// Connection handshake, protocol version 3: the dialer proves knowledge of the
// shared key before the acceptor reveals anything derived from it.
//
//   dialer                                              acceptor
//   Hello{versions, cluster, sysid, node, lane, nonce_d}            ->
//                                         <- HelloReply{version, nonce_a}
//   Auth{incarnation, session, last_seq, max_message, protection, proof_d} ->
//        <- AuthOk{node, incarnation, session, last_seq, max_message, protection, proof_a}
//                                 (or Reject{reason, detail} at any step)
//
//   proof_d = HMAC-SHA256(key, "pgrac-ic v2 dialer"   || Hello || HelloReply || Auth-without-proof)
//   proof_a = HMAC-SHA256(key, "pgrac-ic v2 acceptor" || Hello || HelloReply || Auth
//                                                     || AuthOk-without-proof)
//
// An unauthenticated caller gets a fresh nonce and nothing else: no proof to
// grind a weak key against, and Reject frames without any detail. Once both
// proofs verify, HKDF over the key, both nonces and the transcript gives each
// direction its own frame key (ic/wire/frame_guard.hpp) and the lane a new session
// id. docs/protocol.md is the specification.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ic/session/cluster_settings.hpp"
#include "ic/wire/frame.hpp"
#include "ic/wire/frame_guard.hpp"

namespace pgrac::ic {

inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kProofSize = 32;  // HMAC-SHA256
inline constexpr size_t kMaxClusterName = 63;
// Version 3: Auth and AuthOk carry the settings block (ic/session/cluster_settings.hpp),
// heartbeats the membership's incarnations and timing (ic/membership/membership.hpp).
inline constexpr uint8_t kMinProtocolVersion = 3;
inline constexpr uint8_t kMaxProtocolVersion = 3;
// Handshake frames are small: a connection is held to this until it is authenticated.
inline constexpr uint32_t kMaxHandshakePayload = 512;
// The lane id of a requester lane: one backend's own connection to a peer's
// listener, for its RPCs only (no session to continue, either node may dial).
inline constexpr uint8_t kRequesterLane = 255;
// A key shorter than this is accepted with a warning (pgrac_ctl verify, startup).
inline constexpr size_t kRecommendedKeyBytes = 32;

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
    UnknownLane = 10,     // a lane this cluster does not have (cluster.tcp_paths)
    LimitMismatch = 11,   // another largest message body (PGRAC_IC_MAX_MESSAGE)
    DuplicateNode = 12,   // another instance with this node id is connected
    Busy = 13,            // too many unauthenticated connections
    WrongDirection = 14,  // the node with the lower id dials; this one should not
    ConfigMismatch =
        15,  // a setting that safety or routing rests on differs (ic/session/cluster_settings.hpp)
};
inline constexpr uint16_t kMaxRejectReason = 15;
// Stable lower-case name, e.g. "wrong_key".
const char* reject_reason_name(RejectReason r);

struct LocalIdentity {
    std::string cluster_name;
    uint64_t system_id = 0;
    uint16_t node_id = 0;
    uint64_t incarnation = 0;  // this listener's run: sessions start anew with another
    uint64_t instance = 0;     // this instance (postmaster lifetime): membership binds it
    uint64_t location = 0;     // its data directory on its host (0: unknown): instance_location()
    std::vector<uint8_t> key;  // shared secret from cluster.auth_key_file
    uint32_t max_message = 65536;                        // PGRAC_IC_MAX_MESSAGE
    WireProtection protection = WireProtection::Secure;  // cluster.wire_protection
    ClusterSettings settings{};  // must equal the peer's (config_mismatch otherwise)
};

// One lane's session as this node holds it, offered in the handshake.
struct LaneState {
    uint64_t session_id = 0;         // 0: no session on this lane yet
    uint32_t last_seq_received = 0;  // what we have of the peer's messages
};

struct PeerIdentity {
    uint16_t node_id = 0;
    uint64_t incarnation = 0;
    uint64_t instance = 0;
    uint64_t location = 0;
    uint32_t last_seq_received = 0;  // what the peer has of our messages
    uint8_t version = 0;             // negotiated protocol version
    uint8_t lane = 0;                // which of the pair's connections this is (0 = control)
    uint32_t max_message = 0;
    WireProtection protection = WireProtection::Crc;  // the session's (the stronger offer)
    ClusterSettings settings{};                       // the peer's (equal to ours once Done)
    uint64_t offered_session = 0;                     // the session id we offered (our LaneState)
    uint64_t session_id = 0;                          // the session the lane continues or starts
    bool new_session = false;                         // both sides start the lane again at seq 1
    SessionKeys keys{};                               // this side's send and receive keys
};

// What the handshake asks of its owner (the engine).
class HandshakePolicy {
  public:
    virtual ~HandshakePolicy() = default;
    // Acceptor, before authentication: may node_id connect from peer_address
    // ("host" form) on this lane?
    virtual RejectReason check_peer(uint16_t node_id, const std::string& peer_address,
                                    uint8_t lane) = 0;
    // Our session on (node_id, lane).
    virtual LaneState lane_state(uint16_t node_id, uint8_t lane) = 0;
    // Both sides, once the peer is authenticated: may this instance of node_id
    // (its incarnation) have a session now? *why explains a refusal.
    virtual RejectReason admit(uint16_t node_id, uint64_t incarnation, uint64_t instance,
                               uint64_t location, uint8_t lane, std::string* why) = 0;
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
    // Feed a handshake frame (Hello..Reject) with the frame header's src_node.
    // Frames to send back are appended to out.
    void on_frame(FrameType type, uint16_t src_node, const uint8_t* payload, size_t len,
                  std::vector<HandshakeOutput>* out);

    State state() const { return state_; }
    bool done() const { return state_ == State::Done; }
    bool failed() const { return state_ == State::Failed; }
    // The node that claims to be on the other side (the dialed one, or the
    // Hello's), before it is authenticated; 0 if none yet.
    uint16_t claimed_node() const { return role_ == Role::Dialer ? expected_peer_ : claimed_; }
    const PeerIdentity& peer() const { return peer_; }
    // The lane the Hello asked for (acceptor) or this dialer offers.
    uint8_t lane() const { return pending_.lane; }
    RejectReason reject_reason() const { return reason_; }
    // The peer's proof verified (a Reject we send may then say why).
    bool peer_authenticated() const { return peer_authenticated_; }
    // True when the peer rejected us (its Reject frame), false when we rejected it.
    bool rejected_by_peer() const { return rejected_by_peer_; }
    // Our own full account of the failure (for our log; the Reject we sent
    // carries detail only to an authenticated peer).
    const std::string& error_text() const { return error_; }

  private:
    void fail(RejectReason r, std::string text, std::vector<HandshakeOutput>* out);
    void on_hello(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out);
    void on_hello_reply(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out);
    void on_auth(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out);
    void on_auth_ok(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out);
    void on_reject(const uint8_t* payload, size_t len, std::vector<HandshakeOutput>* out);
    bool admit_peer(uint16_t node, uint32_t max_message, const ClusterSettings& settings,
                    uint64_t incarnation, uint64_t instance, uint64_t location,
                    std::vector<HandshakeOutput>* out);
    // Keys, session id and new_session from the finished transcript.
    void finish(uint64_t dialer_session, uint64_t acceptor_session);
    // How error texts name the other side, as far as it is known in this state.
    std::string peer_name() const;

    Role role_;
    const LocalIdentity& local_;
    HandshakePolicy& policy_;
    uint16_t expected_peer_;
    uint16_t claimed_ = 0;    // acceptor: the node id the Hello claimed
    uint16_t frame_src_ = 0;  // acceptor: src_node of the frame that carried the Hello
    std::string peer_address_;
    State state_;
    bool peer_authenticated_ = false;  // its proof verified: a Reject may say why
    PeerIdentity peer_;
    PeerIdentity pending_;  // learned during the exchange; becomes peer_ on Done
    RejectReason reason_ = RejectReason::None;
    bool rejected_by_peer_ = false;
    std::string error_;
    std::array<uint8_t, kNonceSize> nonce_d_{}, nonce_a_{};
    std::vector<uint8_t> transcript_;
};

// Loads the shared key. Refuses a file that group or others may read, a missing
// file, or a key shorter than 16 bytes; trailing whitespace is ignored. A key
// under kRecommendedKeyBytes sets *warning.
std::optional<std::vector<uint8_t>> load_key_file(const std::string& path, std::string* error,
                                                  std::string* warning = nullptr);

}  // namespace pgrac::ic
