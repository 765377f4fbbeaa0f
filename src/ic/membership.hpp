// Cluster membership: which nodes are members, in which epoch, and whether
// this node may act on its global locks (its lease). GES follows these
// decisions, never raw peer states: a lane lost and regained, a listener or
// LMS restart or a TCP reset is no membership change and frees no lock.
// docs/ges.md, "Membership, leases and epochs", has the safety argument.
//
// The protocol rides on heartbeats (Gossip): each node says which view it has
// committed, which it has accepted (voted for) and which it proposes.
//  * A view is (epoch, members). Members are a majority of the configured
//    voting nodes. A node accepts a proposal only for a higher epoch than any
//    it accepted, only if it is in it, and only if the view leaves out no node
//    it has heard from within peer_timeout. The proposer (the lowest node id
//    it can hear) commits once every member of the view accepted it; others
//    adopt a committed view they accepted. So one epoch names one view, and a
//    node leaves only after every member of the next view stopped hearing it
//    for peer_timeout.
//  * Lease: a node's pings echoed by peers whose accepted view includes it
//    and is committed (a view only voted for is not enough: an older view
//    that leaves the node out, also voted for, may still be committed).
//    It holds while a majority (itself included) echoed a ping sent less than
//    `lease` ago; lease < peer_timeout (a margin for clock rate). A member
//    whose lease runs out is fenced: it stops granting, its backends' locks
//    are void, and it becomes a member again only by accepting a new epoch.
//
// PostgreSQL-free. The durable part (views, accepted vote, lease word,
// history) lives in MembershipShared, in shared memory, so a restarted host
// process resumes it and every process reads it.
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
struct View {
    uint32_t epoch;
    uint32_t pad;
    NodeMask members;
};
inline bool operator==(const View& a, const View& b) {
    return a.epoch == b.epoch && a.members == b.members;
}
inline bool operator!=(const View& a, const View& b) {
    return !(a == b);
}

// Heartbeat payload after the 16-byte ping/pong head:
//   u32 committed epoch, u64 members | u32 accepted epoch, u64 members
//   | u32 proposal epoch (0: none), u64 members | u8 flags | 3 reserved (0)
inline constexpr size_t kGossipSize = 40;
enum GossipFlag : uint8_t {
    kGossipWantEpoch = 0x01,  // I need a new epoch (joining, fenced, LMS restarted)
    kGossipInView = 0x02,     // pong only: you are in my accepted view (lease echo)
};
inline constexpr uint8_t kKnownGossipFlags = 0x03;
struct Gossip {
    View committed{};
    View accepted{};
    View proposal{};
    uint8_t flags = 0;
};
void encode_gossip(const Gossip& g, uint8_t out[kGossipSize]);
// False on a reserved byte, unknown flag, or a view with nodes outside
// `configured` or an epoch without members.
bool decode_gossip(const uint8_t* in, size_t len, NodeMask configured, Gossip* out);

enum class MemberState : uint32_t { Joining = 0, Member = 1, Fenced = 2 };
const char* member_state_name(MemberState s);  // "joining", "member", "fenced"

// The lease word: fence count << 40 | expiry in monotonic milliseconds
// (0: no lease). One 64-bit word, so that any process can test it and mark a
// lapsed lease fenced with one compare-and-swap (exactly once per lapse).
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
    uint32_t committed_epoch;  // published after views[epoch % kViewRing]
    uint32_t state;            // MemberState
    View accepted;             // our vote (durable: never vote twice for one epoch)
    NodeMask muted;            // nodes a vote since our last adopted view left out: no echo
    uint32_t fenced_epoch;     // committed epoch when last fenced
    uint32_t lease_ms;
    uint64_t bump_requests;         // bumped by a restarted LMS: it needs a new epoch
    uint64_t bump_handled;          // bump_requests covered by the committed epoch
    uint64_t stale_epoch_messages;  // GES messages refused for an older epoch
    View views[kViewRing];          // views[e % kViewRing] = view of epoch e
    uint64_t history_next;
    MembershipRecord history[kHistoryLen];
};

// Reader side, for any process.
uint64_t lease_word(const MembershipShared* m);
// Marks a lapsed lease fenced. True if this call did it.
bool fence_if_lapsed(MembershipShared* m, uint64_t now_ms);
// The committed view (epoch 0, no members before the first).
View committed_view(const MembershipShared* m);
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

class Membership {
  public:
    // Resumes from `shm` (a restarted host process); zeroed shm is a start.
    Membership(MembershipConfig cfg, MembershipShared* shm);
    static void init_shared(MembershipShared* shm);

    void set_timing(int heartbeat_interval_ms, int peer_timeout_ms);

    // Inputs. Times are monotonic microseconds, plus Unix time for history.
    void on_heard(uint16_t node, int64_t now_us);
    void on_gossip(uint16_t node, const Gossip& g, int64_t now_us);
    // A pong to our ping sent at ping_sent_us.
    void on_echo(uint16_t node, int64_t ping_sent_us, bool in_view, int64_t now_us);
    // Timed work: lease, proposals, commits. True if our gossip changed.
    bool tick(int64_t now_us);

    Gossip gossip() const;
    // Flag for a pong to `node`: whether it is in our accepted and committed
    // views and no vote since our last adopted view left it out (the echo then
    // counts toward its lease).
    bool in_accepted_view(uint16_t node) const;
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
        int64_t heard_us = 0;   // last frame of any kind
        int64_t echo_us = 0;    // send time of the newest in-view echoed ping
        int64_t gossip_us = 0;  // when its gossip arrived
        Gossip gossip;
    };

    int majority() const { return node_count(cfg_.configured) / 2 + 1; }
    void note_start(int64_t now_us) {
        if (started_us_ == 0) started_us_ = now_us;
    }
    NodeMask reachable(int64_t now_us) const;
    bool try_accept(const View& v, uint16_t proposer, int64_t now_us);
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
    View proposal_{};  // epoch 0: none
    int64_t proposed_at_us_ = 0;
    uint64_t bump_at_accept_ = 0;
    // Time of our first input. We may have heard any node just before we
    // (re)started, so each counts as heard then (see reachable()).
    int64_t started_us_ = 0;
    std::vector<std::string> logs_;
    std::vector<std::pair<MembershipEvent, std::string>> events_;
    int64_t (*unix_clock_)() = nullptr;
};

}  // namespace pgrac::ic
