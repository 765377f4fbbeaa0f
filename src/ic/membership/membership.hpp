// Cluster membership: which nodes are members, in which epoch, and whether
// this node may act on its global locks (its lease). GES follows these
// decisions, never raw peer states: a lane lost and regained, a listener or
// LMS restart or a TCP reset is no membership change and frees no lock.
// docs/ges.md, "Membership, leases and epochs", has the safety argument.
//
// The protocol rides on heartbeats (Gossip): each node says which view it has
// committed, which it has accepted (voted for) and which it proposes.
//  * A view is (epoch, members, binding). Members are a majority of the
//    configured voting nodes; the binding names the instance of each member
//    (its shared memory's `self_instance`), so that one epoch names one
//    instance per node id. A node accepts a proposal only for a higher epoch
//    than any it accepted, only if it is in it, only if the view leaves out no
//    node it has heard from within its exclusion window, and only if the view
//    binds every member to the instance this node admitted for it (or to one
//    it has not met). The proposer (the lowest node id it can hear) commits
//    once every member of the view accepted it; others adopt a committed view
//    they accepted. So one epoch names one view, and a node leaves only after
//    every member of the next view stopped hearing it for its window.
//  * Lease: a node's pings echoed by peers whose accepted view includes it,
//    binds it to this instance, and is committed (a view only voted for is not
//    enough: an older view that leaves the node out, also voted for, may still
//    be committed). Each echo is good for 3/4 of the smaller of this node's
//    peer_timeout and the echoing peer's (which the pong carries); the lease
//    holds while a majority (itself included) echoed recently enough. A member
//    whose lease runs out is fenced: it stops granting, its backends' locks are
//    void, and it becomes a member again only by accepting a new epoch.
//  * Timing may differ between nodes (a rolling reload of cluster.peer_timeout):
//    leases take the smaller value, and a node whose peer_timeout went down
//    keeps excluding by the old value until the old value has passed, so no
//    echo it gave under the old value outlives its window.
//  * One owner per node id: the engine asks claim_verdict() before it admits
//    an instance. The instance a committed or accepted view binds keeps the id;
//    among unbound claimants the older instance wins.
//
// PostgreSQL-free. The durable part (views, accepted vote, bindings, owners,
// lease word, history) lives in MembershipShared, in shared memory, so a
// restarted host process resumes it and every process reads it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pgrac::ic {

using NodeMask = uint64_t;  // bit id-1 for node id
inline NodeMask node_bit(uint16_t id) {
    return NodeMask{1} << (id - 1);
}
inline bool has_node(NodeMask m, uint16_t id) {
    return (m & node_bit(id)) != 0;
}
int node_count(NodeMask m);
std::vector<uint16_t> mask_nodes(NodeMask m);  // ascending ids
NodeMask nodes_mask(const std::vector<uint16_t>& ids);
std::string mask_text(NodeMask m);  // "{1,2,3}"

// Plain data (it lives in shared memory): value-initialise, View{}.
// binding: view_binding() of the members' instances (0 for epoch 0).
struct View {
    uint32_t epoch;
    uint32_t pad;
    NodeMask members;
    uint64_t binding;
};
inline bool operator==(const View& a, const View& b) {
    return a.epoch == b.epoch && a.members == b.members && a.binding == b.binding;
}
inline bool operator!=(const View& a, const View& b) {
    return !(a == b);
}

// Instances by node id: [id - 1].
using InstanceTable = uint64_t[64];
// The binding of a view: a digest of (id, instance) for every member. 0 for no members.
uint64_t view_binding(NodeMask members, const uint64_t* instances_by_id);

// Heartbeat payload after the 16-byte ping/pong head (docs/protocol.md):
//   committed, accepted, proposal: each u32 epoch, u64 members, u64 binding
//   | u8 flags | 3 reserved (0) | u32 peer_timeout ms | u32 heartbeat_interval ms
//   | u64 instance of each proposal member, by ascending id
inline constexpr size_t kGossipFixedSize = 72;
inline constexpr size_t kGossipMaxSize = kGossipFixedSize + 64 * 8;
enum GossipFlag : uint8_t {
    kGossipWantEpoch = 0x01,  // I need a new epoch (joining, fenced, LMS restarted)
    kGossipInView = 0x02,     // pong only: you are in my accepted view (lease echo)
};
inline constexpr uint8_t kKnownGossipFlags = 0x03;
// The bounds of cluster.peer_timeout and cluster.heartbeat_interval (src/instance/guc.cpp).
inline constexpr uint32_t kMinPeerTimeoutMs = 100, kMaxPeerTimeoutMs = 3600000;
inline constexpr uint32_t kMinHeartbeatMs = 10, kMaxHeartbeatMs = 60000;
struct Gossip {
    View committed{};
    View accepted{};
    View proposal{};
    uint8_t flags = 0;
    uint32_t peer_timeout_ms = 0;          // the sender's cluster.peer_timeout
    uint32_t heartbeat_interval_ms = 0;    // the sender's cluster.heartbeat_interval
    uint64_t proposal_instances[64] = {};  // by id - 1; only the proposal's members
};
size_t gossip_size(const Gossip& g);
// Writes gossip_size(g) bytes.
void encode_gossip(const Gossip& g, uint8_t* out);
// False on a wrong length, a reserved byte, an unknown flag, a view with nodes
// outside `configured` or an epoch without members, timing out of bounds, or a
// proposal whose instances are missing or do not match its binding.
bool decode_gossip(const uint8_t* in, size_t len, NodeMask configured, Gossip* out);

enum class MemberState : uint32_t { Joining = 0, Member = 1, Fenced = 2 };
const char* member_state_name(MemberState s);  // "joining", "member", "fenced"

// The lease word: fence count << 40 | expiry in lease-clock milliseconds
// (0: no lease). One 64-bit word, so that any process can test it and mark a
// lapsed lease fenced with one compare-and-swap (exactly once per lapse).
// The lease clock is CLOCK_BOOTTIME, which keeps counting while the machine is
// suspended (CLOCK_MONOTONIC stops: a resumed node would trust a lease that ran
// out), counted from MembershipShared::clock_base_ms, so that the 40 bits hold
// 34 years of uptime whatever the clock's absolute value.
inline constexpr uint64_t kLeaseExpiryMask = (uint64_t{1} << 40) - 1;
inline constexpr uint64_t kLeaseForever = kLeaseExpiryMask;
inline uint32_t lease_fences(uint64_t word) {
    return static_cast<uint32_t>(word >> 40);
}
inline uint64_t lease_expiry_ms(uint64_t word) {
    return word & kLeaseExpiryMask;
}
inline bool lease_valid(uint64_t word, uint64_t now_ms) {
    return lease_expiry_ms(word) > now_ms;
}

enum class MembershipEvent : uint32_t {
    Committed = 1,  // a new view took effect here
    Fenced = 2,     // the lease ran out (at = when it ran out)
    Rejoined = 3,   // a member again after a fence or a start
    Excluded = 4,   // a committed view leaves this node out
};
const char* membership_event_name(MembershipEvent e);  // "committed", ...

struct MembershipRecord {
    uint64_t seq;   // seqlock: odd while written, 0 never written
    int64_t at_us;  // Unix time
    uint32_t epoch;
    uint32_t event;  // MembershipEvent
    NodeMask members;
    char detail[112];
};

inline constexpr int kViewRing = 16;
inline constexpr int kHistoryLen = 64;

struct MembershipShared {
    uint64_t lease_word;
    uint64_t clock_base_ms;  // lease-clock origin (the host sets it when it creates this)
    uint64_t self_instance;  // this instance (postmaster lifetime); set by the host, older < newer
    uint64_t self_location;  // where it runs: instance_location() (0: unknown)
    uint32_t committed_epoch;        // published after views[epoch % kViewRing]
    uint32_t state;                  // MemberState
    View accepted;                   // our vote (durable: never vote twice for one epoch)
    NodeMask muted;                  // nodes a vote since our last adopted view left out: no echo
    uint32_t fenced_epoch;           // committed epoch when last fenced
    uint32_t lease_ms;               // the lease an echo gives now (the smallest timeout known)
    uint32_t advertised_timeout_ms;  // peer_timeout we last told peers (a restarted host keeps it)
    uint32_t window_floor_ms;        // exclusion window kept after peer_timeout went down
    uint32_t pad2;
    uint64_t window_floor_until_ms;  // ... until then (lease clock)
    uint64_t bump_requests;          // bumped by a restarted LMS: it needs a new epoch
    uint64_t bump_handled;           // bump_requests covered by the committed epoch
    uint64_t stale_epoch_messages;   // GES messages refused for an older epoch
    uint64_t future_epoch_messages;  // GES messages refused for an epoch not committed here yet
    View views[kViewRing];           // views[e % kViewRing] = view of epoch e
    uint64_t owner[64];              // instance admitted for each node id (the engine's)
    uint64_t owner_location[64];     // ... and where it runs (0: unknown)
    uint64_t accepted_binding[64];   // instances our accepted vote binds (members only)
    // The instance of each id in the newest view this node voted for, and in
    // the newest committed view of its own, that had the id (kept when a later
    // view leaves the id out), and where the first of them runs (0: unknown).
    uint64_t voted_instance[64];
    uint64_t committed_instance[64];
    uint64_t recorded_location[64];
    // Echoes withheld from a node (withhold_echoes()), lease-clock ms: since, until.
    uint64_t withheld_since_ms[64];
    uint64_t withheld_until_ms[64];
    uint64_t history_next;
    MembershipRecord history[kHistoryLen];
};

// Reader side, for any process.
uint64_t boottime_ms();  // CLOCK_BOOTTIME
// Now on the lease clock: what lease words are compared with.
uint64_t lease_now_ms(const MembershipShared* m);
uint64_t lease_word(const MembershipShared* m);
// Marks a lapsed lease fenced. True if this call did it.
bool fence_if_lapsed(MembershipShared* m, uint64_t now_ms);
// The committed view (epoch 0, no members before the first).
View committed_view(const MembershipShared* m);
// Any process (an LMS whose replay barrier a member never completes): this
// node gives `node` no lease echo until now + for_ms, and from one window after
// now counts it as unheard, so that if a majority does the same the member's
// lease lapses, it is voted out, and it comes back through a new epoch. Safe:
// withholding echoes only shortens leases. A longer withholding in force is kept.
void withhold_echoes(MembershipShared* m, uint16_t node, uint64_t now_ms, uint64_t for_ms);
// History, newest first.
size_t membership_history(const MembershipShared* m, MembershipRecord* out, size_t max);

// Lease length for a peer timeout: 3/4 of it. The rest is the margin for
// clock rates and for the time a fenced node needs to notice.
inline int lease_ms_for(int peer_timeout_ms) {
    return peer_timeout_ms - peer_timeout_ms / 4;
}

struct MembershipConfig {
    uint16_t self = 1;
    NodeMask configured = 0;  // every voting node, self included
    int heartbeat_interval_ms = 1000;
    int peer_timeout_ms = 10000;
};

// What the engine does with an instance that claims a node id (claim_verdict()).
enum class ClaimVerdict {
    Admit,   // the owner, or no owner yet
    Switch,  // admit it, replacing the owner (whose lanes must close)
    Refuse,  // duplicate_node
};

class Membership {
  public:
    // Resumes from `shm` (a restarted host process); zeroed shm is a start.
    Membership(MembershipConfig cfg, MembershipShared* shm);
    static void init_shared(MembershipShared* shm);

    // A reload. A shorter peer_timeout shortens the exclusion window only once
    // the old window has passed (echoes given under it may still count).
    void set_timing(int heartbeat_interval_ms, int peer_timeout_ms, int64_t now_us);

    // Inputs. Times are monotonic microseconds, plus Unix time for history.
    void on_heard(uint16_t node, int64_t now_us);
    void on_gossip(uint16_t node, const Gossip& g, int64_t now_us);
    // A pong to our ping sent at ping_sent_us.
    void on_echo(uint16_t node, int64_t ping_sent_us, bool in_view, int64_t now_us);
    // The host's start (else the first input is): from now on every node counts
    // as heard for a window, and a window told before a restart is kept.
    void note_start(int64_t now_us);
    // Timed work: lease, proposals, commits. True if our gossip changed.
    bool tick(int64_t now_us);

    // One owner per node id. May `instance` have `node`'s id? owner_lanes_up:
    // the engine has a lane up to the current owner. *why explains a refusal
    // (the caller adds addresses).
    // location: where the instance runs (instance_location(); 0 unknown).
    ClaimVerdict claim_verdict(uint16_t node, uint64_t instance, uint64_t location,
                               bool owner_lanes_up, int64_t now_us, std::string* why) const;
    // The engine admitted `instance` (at `location`) for `node`.
    void set_owner(uint16_t node, uint64_t instance, uint64_t location);
    uint64_t owner(uint16_t node) const;
    uint64_t self_instance() const;
    // The exclusion window now: peer_timeout, or the old value after a decrease.
    int64_t window_us(int64_t now_us) const;
    // How often to ping each peer: heartbeat_interval, or more often when a
    // peer's smaller timeout makes leases shorter.
    int ping_interval_ms() const;
    // The peer's last timing (0: not heard yet).
    uint32_t peer_timeout_of(uint16_t node) const;
    uint32_t heartbeat_interval_of(uint16_t node) const;
    // Timing differences that appeared or went away, each (node, text), for
    // the errors view (config_drift).
    std::vector<std::pair<uint16_t, std::string>> take_drift();

    Gossip gossip() const;
    // Flag for a pong to `node`: whether it is in our accepted and committed
    // views and no vote since our last adopted view left it out (the echo then
    // counts toward its lease).
    bool in_accepted_view(uint16_t node) const;
    // in_accepted_view(), for a pong about to be sent: remembers the echo
    // (claim_verdict() keeps the echoed instance's id while it may count).
    bool echo_for(uint16_t node, int64_t now_us);
    NodeMask configured() const { return cfg_.configured; }
    MemberState state() const { return static_cast<MemberState>(shm_->state); }
    View committed() const { return committed_view(shm_); }
    // Log lines for the host (taken by the caller).
    std::vector<std::string> take_logs();
    // The events recorded since the last call, each with its log text, for
    // the errors view.
    std::vector<std::pair<MembershipEvent, std::string>> take_events();
    // Unix-time source (tests set it).
    void set_unix_clock(int64_t (*clock)()) { unix_clock_ = clock; }

  private:
    struct PeerInfo {
        int64_t heard_us = 0;      // last frame of any kind
        int64_t expiry_us = 0;     // lease end its newest in-view echo gives (0: none)
        int64_t echo_sent_us = 0;  // our last in-view echo to it (echo_for)
        int64_t gossip_us = 0;     // when its gossip arrived
        uint32_t drift_to = 0;     // timing last reported as differing (0: agrees)
        uint32_t drift_hb = 0;
        Gossip gossip;
    };

    int majority() const { return node_count(cfg_.configured) / 2 + 1; }
    NodeMask reachable(int64_t now_us) const;
    bool try_accept(const View& v, const uint64_t* instances, uint16_t proposer, int64_t now_us);
    int echo_lease_ms(uint16_t node) const;  // what an echo from node is good for
    void note_timing(uint16_t node, int64_t now_us);
    int min_known_timeout_ms() const;
    uint64_t to_lease_ms(int64_t us) const;  // lease-clock ms of an engine time
    bool bound_here(uint16_t node, uint64_t instance) const;
    bool rebinding_allowed(const View& v, const uint64_t* instances, uint16_t proposer);
    bool withheld(uint16_t node, int64_t now_us) const;
    void adopt(const View& v, int64_t now_us);
    void check_lease(int64_t now_us);
    int64_t computed_expiry_us() const;
    void fence(int64_t now_us, int64_t expired_at_us, const std::string& why);
    void propose(int64_t now_us);
    void try_commit(int64_t now_us);
    bool want_epoch() const;
    void record(MembershipEvent e, uint32_t epoch, NodeMask members, int64_t at_us,
                const std::string& detail);
    void set_state(MemberState s);
    int64_t unix_at(int64_t mono_us, int64_t now_us) const;

    MembershipConfig cfg_;
    MembershipShared* shm_;
    PeerInfo peers_[64];
    View proposal_{};                       // epoch 0: none
    uint64_t proposal_instances_[64] = {};  // the instances proposal_ binds
    int64_t proposed_at_us_ = 0;
    uint64_t bump_at_accept_ = 0;
    // Time of our first input. We may have heard any node just before we
    // (re)started, so each counts as heard then (see reachable()).
    int64_t started_us_ = 0;
    std::vector<std::string> logs_;
    std::vector<std::pair<MembershipEvent, std::string>> events_;
    std::vector<std::pair<uint16_t, std::string>> drift_;
    uint32_t refused_epoch_logged_ = 0;  // last proposal whose binding we refused, logged
    bool epoch_space_logged_ = false;
    uint32_t told_before_start_ms_ = 0;  // the timeout this node told peers before a restart
    int64_t (*unix_clock_)() = nullptr;
};

}  // namespace pgrac::ic
