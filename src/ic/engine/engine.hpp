// The engine: everything the IC Listener does, independent of PostgreSQL and of
// the tier. It owns the transport, one session per (peer, lane), the
// handshakes, heartbeats and peer liveness, and routes messages between the
// shared-memory rings and the wire:
//
//   outbound ring (backends, LMS) --> local delivery | session -> transport
//   transport -> session -> LMS inbox ring (requests) | reply slot (replies)
//
// Single-threaded: the owner calls run_once() whenever wait_fd() is readable,
// its process latch is set, or next_timeout_ms() has passed.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ic/wire/frame_guard.hpp"
#include "ic/session/handshake.hpp"
#include "ic/base/log_throttle.hpp"
#include "ic/membership/membership.hpp"
#include "ic/base/node_list.hpp"
#include "ic/session/session.hpp"
#include "ic/shm/shared_state.hpp"
#include "ic/transport/transport.hpp"

namespace pgrac::ic {

// An RPC's process slot (rpc_id >> 32) is a PGPROC number: never this high
// (MaxBackends' limit is 2^18 - 1, plus auxiliary processes).
inline constexpr uint32_t kMaxRpcSlots = 1u << 19;
// A request this many generations behind its slot's newest, or less, is
// stale (its caller moved on); one further behind is a wrapped count.
inline constexpr uint32_t kStaleWindow = 1u << 16;

struct EngineConfig {
    LocalIdentity identity;          // our node id, cluster, system id, incarnation, key
    std::vector<NodeAddress> nodes;  // every node of the cluster, us included
    int bulk_lanes = 1;              // cluster.tcp_paths: lanes besides the control lane
    int heartbeat_interval_ms = 1000;
    int peer_timeout_ms = 10000;
    Session::Limits session_limits;
    int64_t ack_delay_us = 2000;  // longest a standalone ack waits for a piggyback
    // Accepted connections that have not finished their handshake; more are
    // closed at once (cluster.max_unauthenticated).
    int max_unauthenticated = 64;
    uint64_t rekey_interval = FrameGuard::kDefaultRekeyInterval;  // frames per key
    // Request types the engine's own process serves where they arrive, with
    // no LMS handoff (two process wakeups fewer per RPC), indexed by
    // msg_type; the owner takes them with take_in_place(). Empty: none.
    std::vector<bool> serve_in_place;
};

// What the engine needs from the process that runs it.
class EngineHost {
  public:
    virtual ~EngineHost() = default;
    // Wake the process that owns reply slot `procno` (its RPC completed).
    virtual void wake_process(uint32_t procno) = 0;
    // Wake LMS worker `worker` (its inbox has work).
    virtual void wake_lms(uint32_t worker) = 0;
    // A log line; the host emits it outside the engine's frames.
    virtual void log(Severity severity, const std::string& message) = 0;
};

using TransportFactory = std::function<std::unique_ptr<ic::Transport>(ic::TransportHandler&)>;

// The engine's clock for timers, liveness and leases: CLOCK_BOOTTIME
// microseconds (it counts a suspend, so a lease never outlives one).
inline int64_t now_us() {
    return static_cast<int64_t>(boottime_ns() / 1000);
}

class Engine final : public ic::TransportHandler, public HandshakePolicy {
  public:
    Engine(EngineConfig config, IcShared* shm, EngineHost& host, const TransportFactory& make);
    ~Engine() override;
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Listens on our own address and marks the listener ready.
    bool start(std::string* error);
    int wait_fd() const;
    // Milliseconds until the next timer is due (0 if work is pending).
    int next_timeout_ms() const;
    // Does all ready work without blocking. True if anything moved (a frame
    // in, a record out, a timer fired), which tells the owner whether
    // busy-polling a little longer is likely to pay.
    bool run_once();
    // Serving in place (EngineConfig::serve_in_place). The oldest request held
    // for the owner: copied into `out` (RingPrefix + payload, at most `cap`
    // bytes) and removed; 0 when none is held. One longer than `cap` goes to
    // the LMS workers instead.
    size_t take_in_place(uint8_t* out, size_t cap);
    // A request taken that the owner cannot serve without blocking: the LMS
    // workers serve it, as any other.
    void hand_to_lms(const uint8_t* rec, size_t len);
    // Sends a message from the owner's own process (the reply to a request it
    // served in place): no ring, no wakeup.
    void send_from_owner(uint16_t node, uint16_t flags, const uint8_t* payload, uint32_t len);
    // A reply the owner seals while its handler writes it (served in place,
    // going back on a requester lane under `secure`): the cipher reads each
    // piece where the handler found it (a page in the buffer pool, under its
    // content lock) and writes the frame the transport sends, into a send
    // slot it lends (verbs) or the engine's buffer (TCP): its pass is the
    // only one over the payload. begin_sealed_reply() writes the message
    // header (mh, status as given) and is false when the reply cannot go so
    // (no requester lane waits for it, not `secure`, too big): the handler
    // then writes its reply as usual. Then write_sealed_reply() takes the
    // body_len body bytes in order, and finish_sealed_reply() sends the
    // frame, as send_from_owner() would have. abandon_sealed_reply() drops
    // it (nothing was sent; the reply is still due). A throw from begin,
    // write or finish abandons it first (the reply is still due); once the
    // frame is sealed finish throws no more, and a failed send ends the lane.
    // Between begin and finish or abandon any other engine call throws
    // logic_error; shutdown() abandons it.
    bool begin_sealed_reply(uint16_t node, uint16_t flags, const MessageHeader& mh,
                            uint32_t body_len);
    void write_sealed_reply(const uint8_t* piece, uint32_t len);
    void finish_sealed_reply();
    void abandon_sealed_reply();
    // RPCs that went out from this instance and wait for their reply.
    bool awaiting_replies() const { return !outstanding_.empty(); }
    // Tells peers we are going away and closes every connection.
    void shutdown();
    const char* transport_name() const;
    // New heartbeat and timeout settings (configuration reload).
    void set_timing(int heartbeat_interval_ms, int peer_timeout_ms) {
        cfg_.heartbeat_interval_ms = heartbeat_interval_ms;
        cfg_.peer_timeout_ms = peer_timeout_ms;
        membership_.set_timing(heartbeat_interval_ms, peer_timeout_ms, now_us());
    }
    // Which request types the owner serves in place (configuration reload).
    // Takes effect once nothing waits in an LMS inbox or for the owner, so that
    // the messages of one route key are never served out of order across it.
    void set_serve_in_place(std::vector<bool> types) {
        next_in_place_ = std::move(types);
        in_place_change_ = true;
    }
    const Membership& membership() const { return membership_; }

    // ic::TransportHandler
    void on_connected(ic::ConnId conn, bool ok, const std::string& error) override;
    void on_accepted(ic::ConnId conn, const std::string& peer_host) override;
    void on_frame(ic::ConnId conn, const FrameHeader& h, const uint8_t* payload) override;
    void on_closed(ic::ConnId conn, const std::string& reason, FrameError err) override;

    void on_accept_paused(int err, int pause_ms) override;

    // HandshakePolicy
    RejectReason check_peer(uint16_t node_id, const std::string& peer_address,
                            uint8_t lane) override;
    LaneState lane_state(uint16_t node_id, uint8_t lane) override;
    RejectReason admit(uint16_t node_id, uint64_t incarnation, uint64_t instance, uint64_t location,
                       uint8_t lane, std::string* why) override;

  private:
    struct Lane {
        ic::ConnId conn = 0;
        bool up = false;
        bool ever_up = false;
        bool failure_logged = false;
        Session session;
        int64_t next_dial_us = 0;
        int backoff_ms = 0;
        int64_t ack_due_since_us = 0;
        uint32_t transmitted = 0;  // highest seq handed to the transport
        uint64_t session_id = 0;   // agreed in the handshake; 0 = never connected
    };
    struct Peer {
        NodeAddress addr;
        std::vector<std::string> numeric_hosts;  // addresses it may connect from
        PeerShared* shm = nullptr;
        std::vector<Lane> lanes;
        bool dialer = false;  // we dial lower -> higher node id
        PeerState state = PeerState::Down;
        uint64_t incarnation = 0;
        std::string owner_host;  // where the admitted instance connected from (or was dialed)
        int64_t last_heard_us = 0;
        int64_t next_heartbeat_us = 0;
        int64_t hold_until_us = 0;          // the peer asked us to back off until then
        int64_t backoff_sent_until_us = 0;  // we asked the peer to back off until then
    };
    struct Conn {
        int peer = -1;  // index into peers_ once known
        uint8_t lane = 0;
        bool dialer = false;
        bool established = false;
        std::string peer_host;
        std::unique_ptr<Handshake> handshake;
        std::unique_ptr<FrameGuard> guard;  // once established
        int64_t deadline_us = 0;
        // A requester lane (lane kRequesterLane): requests in, replies out,
        // numbered on their own; no session, nothing resent.
        bool requester = false;
        bool req_pending = false;  // one request at a time: its reply is due
        uint32_t req_received = 0, req_sent = 0;
    };
    struct Outstanding {
        uint64_t rpc_id;
        uint16_t node;
    };

    // routing (engine.cpp)
    void drain_outbound();
    bool same_wire(const uint8_t* a, size_t a_len, const uint8_t* b, size_t b_len);
    void route_outbound(uint16_t node, uint16_t flags, const uint8_t* payload, uint32_t len);
    void send_message(Peer& p, int lane, uint16_t flags, const uint8_t* payload, uint32_t len);
    // Puts one frame on a connection: with its CRC in crc mode, else sealed
    // by the connection's guard.
    bool send_frame(ic::ConnId id, FrameHeader h, const uint8_t* payload);
    // Puts a frame kept for resending on a connection (its first send, a
    // resend, what a backoff held): with its CRC (crc), its tag apart (mac),
    // sealed (secure) into a send slot the transport lends, else where it is
    // kept, opened first if it was sealed for an earlier connection. The
    // transport holds a reference to it, not a copy, if it must queue it.
    bool send_kept(ic::ConnId id, KeptFrameRef& f);
    // A sealed kept frame, whole, the transport holding a reference if it queues it.
    bool send_sealed_kept(ic::ConnId id, const KeptFrameRef& f);
    // The guard of an established connection, nullptr if none.
    FrameGuard* guard_of(ic::ConnId id);
    // Requester lanes (ic/engine/requesters.cpp).
    static constexpr int kMaxRequesterLanes = 512;  // per peer node
    int requester_lanes(int peer) const;
    // Only the instance of the node we hold sessions with, while it is UP.
    RejectReason admit_requester(const Peer& p, uint64_t incarnation, std::string* why);
    void establish_requester(ic::ConnId id, Conn& c, Peer& p, const PeerIdentity& pid);
    void on_requester_frame(ic::ConnId id, Conn& c, Peer& p, const FrameHeader& h,
                            const uint8_t* payload);
    // A reply leaving for a peer, checked against replies_due_: one to a
    // request of a requester lane goes back on it, one whose requester is
    // gone (its lane closed, its node DOWN or restarted) is dropped; true if
    // either was done. False: the peer lanes carry it.
    bool route_due_reply(uint16_t node, uint16_t flags, const MessageHeader& mh,
                         const uint8_t* payload, uint32_t len);
    // Records that a request of `node` awaits its reply (on conn, or
    // kViaPeerLanes); false if the same id still awaits one for the node's
    // previous instance: the request must not run (its reply could not be
    // told from the old one).
    bool expect_reply(uint16_t node, uint64_t rpc_id, ic::ConnId conn);
    void close_requester_lanes(int peer);
    void forget_requester_lane(ic::ConnId id);
    // The node restarted or is DOWN: its processes' requests start afresh.
    void forget_requests_of(uint16_t node, bool restarted);
    // An RPC request older than the newest one seen from its process (one RPC
    // at a time per process): its caller gave up on it, so it must not run
    // after the newer one, whichever path each took. Records the newest.
    bool stale_request(uint16_t node, uint64_t rpc_id);
    // Checks a Message before it counts as received: header, type, body size.
    bool valid_message(Peer& p, const FrameHeader& h, const uint8_t* payload);
    void on_message(Peer& p, int lane, ic::ConnId conn, const FrameHeader& h,
                    const uint8_t* payload);
    void deliver_local(uint16_t src, uint16_t flags, const uint8_t* payload, uint32_t len);
    void deliver_reply(uint64_t rpc_id, uint32_t status, const uint8_t* body, uint32_t len);
    // A request or one-way message for this node: held for the owner
    // (serve_in_place) or pushed to an LMS inbox.
    void deliver_to_lms(uint16_t src, uint16_t flags, const uint8_t* payload, uint32_t len);
    // flush_held: first move what the owner holds for the same worker (it is older).
    void push_to_lms(uint16_t src, uint16_t flags, const uint8_t* payload, uint32_t len,
                     bool flush_held = true);
    // Keeps a copy in `queue` within the backlog limit (else refuses it). True if kept.
    bool hold(std::deque<std::vector<uint8_t>>& queue, uint16_t src, uint16_t flags,
              const MessageHeader& mh, const uint8_t* payload, uint32_t len);
    bool served_in_place(uint16_t msg_type) const {
        return msg_type < cfg_.serve_in_place.size() && cfg_.serve_in_place[msg_type];
    }
    void wake_lms_workers();
    // Wakes the requesters whose reply slots were completed since the last call.
    void wake_processes();
    void apply_in_place_change();
    // Does LMS worker w have something queued (its inbox or the backlog)?
    bool lms_busy(uint32_t w) const;
    uint32_t worker_of(const std::vector<uint8_t>& rec) const;  // route_key % n_lms
    std::vector<uint8_t> pop_held(std::deque<std::vector<uint8_t>>::iterator* it);
    void push_older(const std::vector<uint8_t>& rec);
    // Moves what is held for the owner with route key % n_lms == w (every
    // worker: ~0u) to the LMS workers, in order.
    void hand_all_to_lms(uint32_t w);
    // Congestion (engine.cpp): ask a sender to hold off while the LMS backlog is
    // high; honour such a request; send what was held once it expires.
    void signal_backoff(Peer& p);
    void on_backoff(Peer& p, const FrameHeader& h, const uint8_t* payload);
    void transmit_held(Peer& p, int64_t now_us);
    void transmit_after(Lane& l, uint32_t after);
    void void_abandoned_requests(Peer& p);
    void drain_overflow();
    // Can the LMS backlog held in the listener take one more message?
    bool backlog_has_room(uint32_t payload_len) const;
    void fail_rpc(uint64_t rpc_id, uint32_t status);
    void fail_outstanding(uint16_t node, uint32_t status);
    int choose_lane(const Peer& p, uint16_t flags, uint32_t route_key) const;
    void release_queued(uint16_t node, uint64_t msgs, uint64_t bytes);

    // connections and liveness (ic/engine/links.cpp)
    void run_timers(int64_t now_us);
    void dial(Peer& p, int lane, int64_t now_us);
    void schedule_redial(Lane& l, int64_t now_us);
    void report_connect_failure(Peer& p, Lane& l, const std::string& why);
    void establish(ic::ConnId id, Conn& c);
    void handshake_frame(ic::ConnId id, Conn& c, const FrameHeader& h, const uint8_t* payload);
    void send_handshake(ic::ConnId id, const std::vector<HandshakeOutput>& out);
    void handshake_failed(ic::ConnId id, Conn& c);
    void send_control(ic::ConnId conn, Lane* lane, FrameType type, uint16_t flags,
                      const uint8_t* payload, uint32_t len);
    void send_heartbeat(Peer& p, uint8_t kind, uint64_t ts_ns);
    void on_heartbeat(Peer& p, const FrameHeader& h, const uint8_t* payload);
    // Membership (ic/engine/links.cpp): its timers, and gossip to every peer at once.
    void membership_tick(int64_t now_us);
    void note_config_refusal(const Handshake& hs);
    void set_config_mismatch(Peer& p, const std::string& text);
    void on_ack(Peer& p, Lane& l, uint32_t ack);
    void flush_acks(int64_t now_us);
    void declare_down(Peer& p, const std::string& why);
    // The peer came back as another instance (new incarnation).
    void peer_restarted(Peer& p, uint64_t new_incarnation, ic::ConnId keep, uint8_t lane);
    // Both sides start a lane's session again (the handshake said so).
    void reset_lane(Peer& p, Lane& l, int lane);
    // A frame that breaks the protocol: counted, logged, connection dropped.
    void drop_conn(ic::ConnId id, Peer& p, ErrorType type, const std::string& why);
    void update_state(Peer& p);
    void set_state(Peer& p, PeerState s);
    void close_conn(ic::ConnId id);
    void report(ErrorType type, Severity sev, int peer_node, const std::string& text);
    // As report(), but a flood (unauthenticated connections) is logged at
    // most once per type every few seconds; every event is still counted.
    void report_throttled(ErrorType type, Severity sev, int peer_node, const std::string& text);
    int unauthenticated_conns() const;
    Peer* peer_by_node(uint16_t node);

    EngineConfig cfg_;
    IcShared* shm_;
    EngineHost& host_;
    std::unique_ptr<ic::Transport> transport_;
    Membership membership_;
    uint32_t fences_seen_ = 0;
    std::vector<Peer> peers_;
    std::vector<int> peer_index_;  // node id -> index in peers_, or -1
    std::unordered_map<ic::ConnId, Conn> conns_;
    std::unordered_map<uint32_t, Outstanding> outstanding_;  // by reply slot
    // Requests taken from peers, until their reply leaves, by (source node,
    // rpc_id): the requester lane each came on, kViaPeerLanes, or 0 when the
    // requester is gone and the reply is to be dropped.
    static constexpr ic::ConnId kViaPeerLanes = ~ic::ConnId{0};
    std::map<std::pair<uint16_t, uint64_t>, ic::ConnId> replies_due_;
    // Newest RPC generation seen per (node, requesting process's slot).
    std::unordered_map<uint64_t, uint32_t> newest_rpc_;
    std::vector<std::deque<std::vector<uint8_t>>> overflow_;  // per LMS worker
    // Requests held for the owner to serve in place; counted in overflow_bytes_
    // like the LMS backlog, so the same limits hold.
    std::deque<std::vector<uint8_t>> in_place_;
    // Buffers of records the owner took, for hold() to reuse.
    static constexpr size_t kHeldSpares = 16;
    static constexpr size_t kMaxHeldSpareBytes = 64 * 1024 + 256;
    std::vector<std::vector<uint8_t>> held_spares_;
    std::vector<bool> next_in_place_;  // set_serve_in_place, until it takes effect
    bool in_place_change_ = false;
    std::vector<uint32_t> held_per_worker_;  // in_place_ records per LMS worker
    std::vector<uint32_t> procs_to_wake_;    // reply slots completed, owners not yet woken
    size_t overflow_bytes_ = 0;
    uint32_t lms_to_wake_ = 0;  // bitmask
    int64_t next_timer_us_ = 0;
    int64_t last_timers_us_ = 0;
    static constexpr int64_t kTimerPeriodUs = 1000;
    bool shutting_down_ = false;
    uint64_t work_ = 0;              // bumped by everything that moves a message
    std::vector<uint8_t> seal_buf_;  // one sealed frame on its way to the transport
    // The reply begin_sealed_reply() started (requesters.cpp).
    struct SealedReply {
        ic::ConnId conn = 0;    // 0: none
        bool reserved = false;  // sealed into the transport's send slot, else sealed_buf_
        uint16_t node = 0;
        uint64_t rpc_id = 0;
        FrameHeader h;
        size_t sealed_len = 0;
    } sealed_reply_;
    std::vector<uint8_t> sealed_buf_;  // its frame when the transport lends no slot (TCP)
    FrameGuard& sealed_reply_guard();
    // The owner's calls between begin_sealed_reply() and its finish or
    // abandon throw logic_error: the transport's lent slot and the guard's
    // open frame allow no other send meanwhile.
    void require_no_sealed_reply(const char* what) const;
    LogThrottle throttle_;
};

}  // namespace pgrac::ic
