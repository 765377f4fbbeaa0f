// The membership simulator (ic/membership/membership.hpp): a deterministic
// discrete-event simulation of N nodes, each a Membership over its own
// MembershipShared, wired the way the engine wires them (ic/engine/links.cpp:
// heartbeat pings with gossip, pongs that echo the ping's send time and flag
// our accepted view, a tick every 100 ms and after every frame, pings to all at
// once when the gossip changed). One clock, message delays (in order per pair),
// partitions both ways or one way, frozen nodes, restarts of the host process
// (shared memory kept) and of the host (new shared memory). After every event
// the safety invariants are checked:
//  * uniqueness: one epoch names one member set, on every node;
//  * lease safety: when a view is committed, every node it leaves out has an
//    expired lease; and no node holds a valid lease while a view that leaves it
//    out is committed anywhere in a newer epoch than its own committed view;
//  * views are first committed in epoch order, and no node's epoch goes back.
// It also measures: the heartbeat bytes each node sends and receives (each
// frame as the engine puts it on the wire: frame header, heartbeat head,
// gossip, tag; see heartbeat_wire_bytes); and it tells when every surviving
// node has committed a view without a node that failed (excluded_everywhere),
// so that the time from a failure (fail(): freeze, isolate) to it can be taken.
//
// Used by tests/unit/membership/*_test.cpp and bench/tools/membership_scale.cpp,
// so it does not depend on GoogleTest: a violation goes to the failure handler
// (the tests make it a test failure) and is counted.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ic/membership/membership.hpp"
#include "ic/wire/frame.hpp"
#include "ic/wire/frame_guard.hpp"

namespace pgrac::ic {
// How GoogleTest prints a View (found by argument-dependent lookup), the same
// in every file that includes this.
inline void PrintTo(const View& v, std::ostream* os) {
    *os << "epoch " << v.epoch << " " << mask_text(v.members);
}
}  // namespace pgrac::ic

namespace pgrac::ic::memsim {

inline constexpr int64_t kMs = 1000;
inline constexpr int64_t kSec = 1000 * kMs;
inline constexpr int64_t kStartUs = 10 * kSec;  // monotonic clocks do not start at 0

inline int64_t g_unix_now_us = 0;
inline int64_t sim_unix_clock() {
    return g_unix_now_us;
}

inline NodeMask first_nodes(int n) {
    return n >= 64 ? ~NodeMask{0} : (NodeMask{1} << n) - 1;
}

// Where a safety violation or an undecodable frame is reported: the tests set
// a handler that makes it a test failure; without one it goes to stderr. Every
// report is counted in g_failures either way.
using FailureHandler = void (*)(const std::string& what);
inline FailureHandler g_failure_handler = nullptr;
inline uint64_t g_failures = 0;
inline void report_failure(const std::string& what) {
    g_failures++;
    if (g_failure_handler != nullptr)
        g_failure_handler(what);
    else
        fprintf(stderr, "membership simulator: %s\n", what.c_str());
}

// A heartbeat on the wire (docs/protocol.md, "Frame" and "Liveness and
// membership"): the 24-byte frame header, the 16-byte heartbeat head (kind,
// epoch, timestamp), the gossip, and the 16-byte AES-GCM tag that `mac` and
// `secure` (the default) add to every frame. Under `crc` it is 16 bytes less.
inline constexpr size_t kHeartbeatHeadSize = 16;  // ic/engine/links.cpp's kHeartbeatHead
inline size_t heartbeat_wire_bytes(size_t gossip_bytes) {
    return kFrameHeaderSize + kHeartbeatHeadSize + gossip_bytes + kFrameTagSize;
}

// Heartbeats (pings and pongs) a node sent and received, and their bytes
// (heartbeat_wire_bytes). Sent: every frame its engine writes, including to a
// peer the network drops it for (a cut link, a crashed peer); received: every
// frame delivered to it (held while frozen: counted when it thaws).
struct Traffic {
    uint64_t frames_sent = 0;
    uint64_t bytes_sent = 0;
    uint64_t frames_received = 0;
    uint64_t bytes_received = 0;
};

// A heartbeat frame in flight.
struct Frame {
    uint16_t from = 0;
    uint16_t to = 0;
    uint64_t to_incarnation = 0;  // frames to an incarnation that restarted are lost
    uint64_t from_instance = 0;   // the sender's instance (its shared memory)
    uint64_t from_location = 0;   // ... and where it runs
    int from_slot = 0;            // sender and receiver in the simulator (a second
    int to_slot = 0;              // instance of an id has a slot of its own)
    bool pong = false;
    int64_t ping_sent_us = 0;  // the ping's send time; a pong echoes it
    std::vector<uint8_t> gossip;
};

struct SimNode {
    uint16_t id = 0;
    std::unique_ptr<MembershipShared> shm;
    std::unique_ptr<Membership> m;
    uint64_t incarnation = 0;
    uint64_t instance = 0;      // changes with the shared memory (restart())
    int peer_timeout_ms = 0;    // 0: SimOptions::peer_timeout_ms
    uint32_t told_file_ms = 0;  // what the data directory's timing file holds
    bool frozen = false;        // stopped: receives (buffers), sends and ticks nothing
    bool down = false;          // crashed: frames to it are lost
    int64_t frozen_at_us = 0;
    int64_t next_timer_us = 0;
    int64_t next_heartbeat_us = 0;
    std::vector<Frame> held;  // frames that arrived while frozen
    uint32_t last_epoch = 0;  // committed epoch seen last (this incarnation)
    int slot = 0;             // index in the simulator + 1 (the id, but for a second instance)
    uint64_t location = 0;    // where it runs (the id, but for a second instance elsewhere)
    int heartbeat_ms = 0;     // 0: SimOptions::heartbeat_ms
    Traffic traffic;
};

// The safety invariants, checked after every event.
class SafetyMonitor {
  public:
    void check(const std::vector<SimNode>& nodes, int64_t now_us,
               const std::function<std::string()>& trace) {
        const uint64_t now_ms = static_cast<uint64_t>(now_us) / 1000;
        views_.resize(nodes.size());
        seen_.resize(nodes.size());
        for (size_t i = 0; i < nodes.size(); i++)
            if (!nodes[i].down) views_[i] = committed_view(nodes[i].shm.get());
        for (size_t i = 0; i < nodes.size(); i++) {
            const SimNode& n = nodes[i];
            if (n.down) continue;
            const View c = views_[i];
            if (c.epoch < n.last_epoch)
                fail(trace, "node " + std::to_string(n.id) + " went back from epoch " +
                                std::to_string(n.last_epoch) + " to " + std::to_string(c.epoch));
            if (c.epoch == 0) continue;
            // What follows checks (epoch, members, binding, instance) against every
            // view committed before; once it passed, the same again passes.
            if (seen_[i].first == c && seen_[i].second == n.instance) continue;
            const int violations_before = violations_;
            // One instance per id and epoch (a node commits only a view it voted for).
            if (has_node(c.members, n.id)) {
                auto [at, afirst] = instances_.emplace(std::make_pair(c.epoch, n.id), n.instance);
                if (!afirst && at->second != n.instance)
                    fail(trace, "epoch " + std::to_string(c.epoch) + " committed by instances " +
                                    std::to_string(at->second) + " and " +
                                    std::to_string(n.instance) + " of node " +
                                    std::to_string(n.id));
            }
            auto [it, first] = committed_.emplace(c.epoch, c.members);
            auto [bt, bfirst] = bindings_.emplace(c.epoch, c.binding);
            if (!bfirst && bt->second != c.binding)
                fail(trace, "epoch " + std::to_string(c.epoch) + " committed with two bindings");
            if (!first && it->second != c.members)
                fail(trace, "epoch " + std::to_string(c.epoch) + " committed as " +
                                mask_text(it->second) + " and as " + mask_text(c.members) +
                                " (node " + std::to_string(n.id) + ")");
            if (violations_ == violations_before) seen_[i] = std::make_pair(c, n.instance);
            if (!first) continue;
            if (committed_.rbegin()->first != c.epoch)
                fail(trace, "node " + std::to_string(n.id) + " committed epoch " +
                                std::to_string(c.epoch) + " after epoch " +
                                std::to_string(committed_.rbegin()->first) + " was committed");
            // A new view: every node it leaves out has lost its lease by now.
            for (const SimNode& k : nodes) {
                if (k.down || has_node(c.members, k.id)) continue;
                const uint64_t w = lease_word(k.shm.get());
                if (lease_valid(w, now_ms))
                    fail(trace, "node " + std::to_string(n.id) + " committed epoch " +
                                    std::to_string(c.epoch) + " " + mask_text(c.members) +
                                    " while node " + std::to_string(k.id) +
                                    " holds a lease until " + std::to_string(lease_expiry_ms(w)) +
                                    " ms (now " + std::to_string(now_ms) + ")");
            }
        }
        for (size_t i = 0; i < nodes.size(); i++) {
            const SimNode& k = nodes[i];
            if (k.down || !lease_valid(lease_word(k.shm.get()), now_ms)) continue;
            const View c = views_[i];
            auto who = [&k] { return "node " + std::to_string(k.id); };
            if (k.m->state() != MemberState::Member)
                fail(trace, who() + " holds a lease in state " + member_state_name(k.m->state()));
            if (!has_node(c.members, k.id))
                fail(trace, who() + " holds a lease outside its view " + mask_text(c.members));
            for (auto it = committed_.upper_bound(c.epoch); it != committed_.end(); ++it) {
                if (!has_node(it->second, k.id))
                    fail(trace, who() + " holds a lease in epoch " + std::to_string(c.epoch) +
                                    " while epoch " + std::to_string(it->first) + " " +
                                    mask_text(it->second) + " is committed without it");
                // ... or with another instance of its id.
                const auto other = instances_.find(std::make_pair(it->first, k.id));
                if (other != instances_.end() && other->second != k.instance)
                    fail(trace, who() + " (instance " + std::to_string(k.instance) +
                                    ") holds a lease in epoch " + std::to_string(c.epoch) +
                                    " while epoch " + std::to_string(it->first) + " " +
                                    mask_text(it->second) + " is committed with instance " +
                                    std::to_string(other->second) + " of node " +
                                    std::to_string(k.id));
            }
        }
    }

    const std::map<uint32_t, NodeMask>& committed() const { return committed_; }
    int violations() const { return violations_; }
    // Each node's committed view at the last check (by slot - 1; stale for a node down).
    const std::vector<View>& views() const { return views_; }

  private:
    void fail(const std::function<std::string()>& trace, const std::string& what) {
        if (violations_++ == 0) report_failure(what + "\nrecent events:\n" + trace());
    }

    std::map<uint32_t, NodeMask> committed_;                       // every view committed anywhere
    std::map<uint32_t, uint64_t> bindings_;                        // ... and its binding
    std::map<std::pair<uint32_t, uint16_t>, uint64_t> instances_;  // (epoch, id): instance
    int violations_ = 0;
    std::vector<View> views_;                      // committed_view() of each node
    std::vector<std::pair<View, uint64_t>> seen_;  // last (view, instance) that passed
};

// How a node fails in fail(): stopped (a hung process, a paused VM), or cut
// off both ways from every other node (it runs on, alone).
enum class FailureKind { Freeze, Isolate };
inline const char* failure_kind_name(FailureKind k) {
    return k == FailureKind::Freeze ? "freeze" : "isolate";
}

struct SimOptions {
    int nodes = 3;
    uint64_t seed = 1;
    int64_t min_delay_us = 100;
    int64_t max_delay_us = 500;
    int heartbeat_ms = 100;
    int peer_timeout_ms = 1000;           // lease: 750 ms
    std::vector<int> node_timeouts_ms{};  // per node (index id - 1), else peer_timeout_ms
    bool reloads = false;  // soak: also reload peer_timeout on random nodes (up or down)
};
inline SimOptions sim(int nodes, uint64_t seed, int64_t min_delay_us = 100,
                      int64_t max_delay_us = 500, int heartbeat_ms = 100,
                      int peer_timeout_ms = 1000) {
    SimOptions o;
    o.nodes = nodes;
    o.seed = seed;
    o.min_delay_us = min_delay_us;
    o.max_delay_us = max_delay_us;
    o.heartbeat_ms = heartbeat_ms;
    o.peer_timeout_ms = peer_timeout_ms;
    return o;
}

// N nodes, one clock, a queue of events (frames, timers, scripted actions).
class Cluster {
  public:
    explicit Cluster(SimOptions opt) : opt_(opt), rng_(opt.seed), now_(kStartUs) {
        configured_ = first_nodes(opt.nodes);
        nodes_.resize(opt.nodes);
        cut_.assign(opt.nodes + 1, std::vector<bool>(opt.nodes + 1, false));
        last_arrival_.assign(opt.nodes + 1, std::vector<int64_t>(opt.nodes + 1, 0));
        for (int i = 0; i < opt.nodes; i++) {
            nodes_[i].id = static_cast<uint16_t>(i + 1);
            nodes_[i].slot = i + 1;
            nodes_[i].location = nodes_[i].id;
            start(nodes_[i]);
        }
        check();
    }

    int size() const { return static_cast<int>(nodes_.size()); }
    int64_t now_us() const { return now_; }
    NodeMask configured() const { return configured_; }
    SimNode& node(uint16_t id) { return nodes_.at(id - 1); }
    Membership& m(uint16_t id) { return *node(id).m; }
    MembershipShared* shm(uint16_t id) { return node(id).shm.get(); }
    View view(uint16_t id) { return committed_view(shm(id)); }
    MemberState state(uint16_t id) { return m(id).state(); }
    bool lease_ok(uint16_t id) { return lease_valid(lease_word(shm(id)), now_ / 1000); }
    const SafetyMonitor& monitor() const { return monitor_; }
    uint32_t max_epoch() const {
        return monitor_.committed().empty() ? 0 : monitor_.committed().rbegin()->first;
    }
    // Every view committed anywhere since epoch `after`.
    std::vector<View> views_after(uint32_t after) const {
        std::vector<View> out;
        for (auto it = monitor_.committed().upper_bound(after); it != monitor_.committed().end();
             ++it)
            out.push_back(View{it->first, 0, it->second, 0});
        return out;
    }

    // ---- faults
    void cut(uint16_t from, uint16_t to) { set_cut(from, to, true); }
    void cut_both(uint16_t a, uint16_t b) {
        set_cut(a, b, true);
        set_cut(b, a, true);
    }
    void isolate(uint16_t id) {
        for (int other = 1; other <= size(); other++)
            if (other != id) cut_both(id, static_cast<uint16_t>(other));
    }
    void heal_all() {
        for (auto& row : cut_) std::fill(row.begin(), row.end(), false);
        note("heal all links");
    }
    void heal_both(uint16_t a, uint16_t b) {
        set_cut(a, b, false);
        set_cut(b, a, false);
    }
    void freeze(uint16_t id) {
        SimNode& n = node(id);
        if (n.frozen || n.down) return;
        n.frozen = true;
        n.frozen_at_us = now_;
        note("node " + std::to_string(id) + " frozen");
    }
    void thaw(uint16_t id) {
        SimNode& n = node(id);
        if (!n.frozen) return;
        n.frozen = false;
        n.next_timer_us = now_;
        std::vector<Frame> held;
        held.swap(n.held);
        // After a long stop the peers' engines have closed the connections: the
        // buffered frames are gone. Otherwise they arrive now, in order.
        if (now_ - n.frozen_at_us < opt_.peer_timeout_ms * kMs)
            for (const Frame& f : held) push(now_, Event{Event::Kind::Frame, f, nullptr});
        note("node " + std::to_string(id) + " thawed after " +
             std::to_string((now_ - n.frozen_at_us) / kMs) + " ms");
    }
    // Crashed: no frames in or out until restart().
    void crash(uint16_t id) {
        SimNode& n = node(id);
        n.down = true;
        n.frozen = false;
        n.held.clear();
        note("node " + std::to_string(id) + " down");
    }
    // A new host with zeroed shared memory (after crash(), or at once).
    void restart(uint16_t id) {
        SimNode& n = node(id);
        n.down = false;
        n.frozen = false;
        n.held.clear();
        // The data directory's timing file (src/instance/timing_file.cpp): the largest
        // window in force when the old instance last wrote it.
        if (n.shm) {
            const MembershipShared* old = n.shm.get();
            uint32_t told = old->advertised_timeout_ms;
            if (static_cast<uint64_t>(now_ / 1000) < old->window_floor_until_ms)
                told = std::max(told, old->window_floor_ms);
            n.told_file_ms = told;
        }
        n.shm.reset();
        n.last_epoch = 0;
        start(n);
        note("node " + std::to_string(id) + " restarted with new shared memory (incarnation " +
             std::to_string(n.incarnation) + ")");
        check();
    }
    // A failure of node `id` now, and its end (thawed; every link healed).
    void fail(uint16_t id, FailureKind kind) {
        if (kind == FailureKind::Freeze)
            freeze(id);
        else
            isolate(id);
    }
    void recover(uint16_t id, FailureKind kind) {
        if (kind == FailureKind::Freeze)
            thaw(id);
        else
            heal_all();
    }
    // A reload of cluster.peer_timeout on one node.
    void set_timeout(uint16_t id, int peer_timeout_ms) {
        SimNode& n = node(id);
        n.peer_timeout_ms = peer_timeout_ms;
        n.m->set_timing(heartbeat_of(n), peer_timeout_ms, now_);
        note("node " + std::to_string(id) + " peer_timeout " + std::to_string(peer_timeout_ms) +
             " ms");
    }
    // A reload of both timing settings on one node.
    void set_timing(uint16_t id, int heartbeat_ms, int peer_timeout_ms) {
        SimNode& n = node(id);
        n.heartbeat_ms = heartbeat_ms;
        n.peer_timeout_ms = peer_timeout_ms;
        n.m->set_timing(heartbeat_ms, peer_timeout_ms, now_);
        n.next_heartbeat_us = std::min(n.next_heartbeat_us, now_ + heartbeat_ms * kMs);
        note("node " + std::to_string(id) + " heartbeat_interval " + std::to_string(heartbeat_ms) +
             " ms, peer_timeout " + std::to_string(peer_timeout_ms) + " ms");
    }
    int heartbeat_of(const SimNode& n) const {
        return n.heartbeat_ms != 0 ? n.heartbeat_ms : opt_.heartbeat_ms;
    }
    // A second instance of node `id` (another shared memory, maybe another
    // place), started now with `instance` (0: newer than every instance so
    // far) at `location`. Its slot (for cut, freeze, crash, node, m, shm...)
    // is returned. Frames of each instance pass the receiver's claim_verdict;
    // a node pings the instance it admitted for the id (every instance of it
    // while it admitted none of them).
    int add_instance(uint16_t id, uint64_t instance, uint64_t location) {
        SimNode n;
        n.id = id;
        n.slot = size() + 1;
        n.location = location;
        n.peer_timeout_ms = timeout_of(node(id));
        n.heartbeat_ms = node(id).heartbeat_ms;
        n.shm = std::make_unique<MembershipShared>();
        Membership::init_shared(n.shm.get());
        n.shm->self_instance = n.instance = instance != 0 ? instance : ++instances_;
        nodes_.push_back(std::move(n));
        for (auto& row : cut_) row.push_back(false);
        cut_.emplace_back(size() + 1, false);
        for (auto& row : last_arrival_) row.push_back(0);
        last_arrival_.emplace_back(size() + 1, 0);
        start(nodes_.back());
        note("node " + std::to_string(id) + " instance " + std::to_string(nodes_.back().instance) +
             " started at location " + std::to_string(location) + " (slot " +
             std::to_string(nodes_.back().slot) + ")");
        check();
        return nodes_.back().slot;
    }
    int timeout_of(const SimNode& n) const {
        if (n.peer_timeout_ms != 0) return n.peer_timeout_ms;
        if (static_cast<size_t>(n.id) <= opt_.node_timeouts_ms.size())
            return opt_.node_timeouts_ms[n.id - 1];
        return opt_.peer_timeout_ms;
    }
    // The host process restarts; shared memory (votes, views, lease) survives.
    void restart_process(uint16_t id) {
        SimNode& n = node(id);
        n.frozen = false;
        n.held.clear();
        start(n);
        note("node " + std::to_string(id) + " host process restarted (incarnation " +
             std::to_string(n.incarnation) + ")");
        check();
    }
    // Runs `action` at time `at_us` (a scripted fault or heal).
    void at(int64_t at_us, std::function<void()> action) {
        push(at_us, Event{Event::Kind::Action, Frame{}, std::move(action)});
    }

    // ---- running
    // Runs until `done` holds (checked after every event) or `for_us` passed.
    bool run_until(const std::function<bool()>& done, int64_t for_us) {
        const int64_t end = now_ + for_us;
        if (done()) return true;
        while (step(end))
            if (done()) return true;
        now_ = end;
        return false;
    }
    void run_for(int64_t for_us) {
        run_until([] { return false; }, for_us);
    }

    // Every node of `members` a member of the view of exactly `members`, with a
    // valid lease.
    bool converged(NodeMask members) {
        View first{};
        for (uint16_t id : mask_nodes(members)) {
            SimNode& n = node(id);
            const View v = committed_view(n.shm.get());
            if (first.epoch == 0) first = v;
            if (n.down || v != first || v.members != members ||
                n.m->state() != MemberState::Member || !lease_ok(n.id))
                return false;
        }
        return first.epoch != 0;
    }
    bool converged() { return converged(configured_); }

    // Every other node that runs (not down, not frozen) has committed a view
    // that leaves `id` out: the failure of `id` is over for the survivors.
    bool excluded_everywhere(uint16_t id) {
        bool any = false;
        for (SimNode& n : nodes_) {
            if (n.id == id || n.down || n.frozen) continue;
            const View v = committed_view(n.shm.get());
            if (v.epoch == 0 || has_node(v.members, id)) return false;
            any = true;
        }
        return any;
    }

    // ---- heartbeat traffic (Traffic), counted from the last reset
    void reset_traffic() {
        for (SimNode& n : nodes_) n.traffic = Traffic{};
        traffic_since_us_ = now_;
    }
    int64_t traffic_since_us() const { return traffic_since_us_; }

    // History events of a node, oldest first ("committed", "fenced", ...).
    std::vector<std::string> history(uint16_t id) {
        MembershipRecord recs[kHistoryLen];
        const size_t n = membership_history(shm(id), recs, kHistoryLen);
        std::vector<std::string> out;
        for (size_t i = n; i > 0; i--)
            out.push_back(membership_event_name(static_cast<MembershipEvent>(recs[i - 1].event)));
        return out;
    }
    bool has_history(uint16_t id, const std::string& event) {
        const std::vector<std::string> h = history(id);
        return std::find(h.begin(), h.end(), event) != h.end();
    }

    // Each node's state, for a failure message.
    std::string dump() {
        std::string s;
        for (SimNode& n : nodes_) {
            const Gossip g = n.m->gossip();
            s += "  node " + std::to_string(n.id) + " instance " + std::to_string(n.instance) +
                 " " + member_state_name(n.m->state()) + " committed " +
                 std::to_string(g.committed.epoch) + mask_text(g.committed.members) + " accepted " +
                 std::to_string(g.accepted.epoch) + mask_text(g.accepted.members) + " proposal " +
                 std::to_string(g.proposal.epoch) + mask_text(g.proposal.members) + " want " +
                 std::to_string(g.flags & kGossipWantEpoch) + " owners";
            for (uint16_t id = 1; id <= size(); id++) s += " " + std::to_string(n.m->owner(id));
            s += "\n";
        }
        return s;
    }

    std::string trace() const {
        std::string s;
        for (const std::string& line : trace_) s += "  " + line + "\n";
        return s;
    }

  private:
    struct Event {
        enum class Kind { Frame, Action } kind;
        Frame frame;
        std::function<void()> action;
    };
    struct Queued {
        int64_t at;
        uint64_t seq;
        size_t slot;
        bool operator>(const Queued& o) const { return at != o.at ? at > o.at : seq > o.seq; }
    };

    void start(SimNode& n) {
        if (!n.shm) {
            n.shm = std::make_unique<MembershipShared>();
            Membership::init_shared(n.shm.get());
            n.shm->advertised_timeout_ms = n.told_file_ms;
            // Instances grow with time (older < newer), as the glue's do.
            n.shm->self_instance = n.instance = ++instances_;
        }
        MembershipConfig cfg;
        cfg.self = n.id;
        cfg.configured = configured_;
        cfg.heartbeat_interval_ms = heartbeat_of(n);
        cfg.peer_timeout_ms = timeout_of(n);
        n.m = std::make_unique<Membership>(cfg, n.shm.get());
        n.m->set_unix_clock(sim_unix_clock);
        n.m->note_start(now_);  // as the engine does when it is made
        n.incarnation++;
        n.next_timer_us =
            now_ + std::uniform_int_distribution<int64_t>(0, heartbeat_of(n) * kMs)(rng_);
        n.next_heartbeat_us = n.next_timer_us;
        collect_logs(n);
    }

    void set_cut(uint16_t from, uint16_t to, bool cut) {
        cut_[from][to] = cut;
        note(std::string(cut ? "cut " : "heal ") + std::to_string(from) + "->" +
             std::to_string(to));
    }

    void push(int64_t at, Event e) {
        size_t slot;
        if (!free_.empty()) {
            slot = free_.back();
            free_.pop_back();
            slots_[slot] = std::move(e);
        } else {
            slot = slots_.size();
            slots_.push_back(std::move(e));
        }
        queue_.push(Queued{at, seq_++, slot});
    }

    // One event at or before `end`; false if there is none.
    bool step(int64_t end) {
        SimNode* timer = nullptr;
        for (SimNode& n : nodes_)
            if (!n.down && !n.frozen &&
                (timer == nullptr || n.next_timer_us < timer->next_timer_us))
                timer = &n;
        const int64_t frame_at = queue_.empty() ? INT64_MAX : queue_.top().at;
        const int64_t timer_at = timer == nullptr ? INT64_MAX : timer->next_timer_us;
        const int64_t at = std::min(frame_at, timer_at);
        if (at > end) return false;
        now_ = std::max(now_, at);
        g_unix_now_us = 1'700'000'000 * kSec + now_;
        if (frame_at <= timer_at) {
            const Queued q = queue_.top();
            queue_.pop();
            Event e = std::move(slots_[q.slot]);
            free_.push_back(q.slot);
            if (e.kind == Event::Kind::Action)
                e.action();
            else
                deliver(e.frame);
        } else {
            // Engine::run_timers: a tick every min(heartbeat, 100 ms), then
            // the heartbeats that are due.
            timer->next_timer_us = now_ + std::min(heartbeat_of(*timer), 100) * kMs;
            membership_tick(*timer);
            if (now_ >= timer->next_heartbeat_us) {
                timer->next_heartbeat_us = now_ + timer->m->ping_interval_ms() * kMs;
                ping_all(*timer);
            }
        }
        check();
        return true;
    }

    void check() {
        monitor_.check(nodes_, now_, [this] { return trace(); });
        for (size_t i = 0; i < nodes_.size(); i++)
            if (!nodes_[i].down) nodes_[i].last_epoch = monitor_.views()[i].epoch;
    }

    void send(Frame f) {
        Traffic& t = node(static_cast<uint16_t>(f.from_slot)).traffic;
        t.frames_sent++;
        t.bytes_sent += heartbeat_wire_bytes(f.gossip.size());
        SimNode& to = node(static_cast<uint16_t>(f.to_slot));
        if (cut_[f.from_slot][f.to_slot] || to.down) return;
        f.to_incarnation = to.incarnation;
        const int64_t delay =
            std::uniform_int_distribution<int64_t>(opt_.min_delay_us, opt_.max_delay_us)(rng_);
        // One TCP connection per pair: frames arrive in order.
        int64_t& last = last_arrival_[f.from_slot][f.to_slot];
        last = std::max(now_ + delay, last);
        push(last, Event{Event::Kind::Frame, std::move(f), nullptr});
    }

    void ping_all(SimNode& n) {
        const std::vector<uint8_t> gossip = encoded(n.m->gossip());  // the same to all
        for (uint16_t id = 1; id <= opt_.nodes; id++)
            if (id != n.id) send_ping(n, id, gossip);
    }

    // To node `to`: its only instance, or the one `n` admitted, or (none of
    // them admitted) each of them.
    void send_ping(SimNode& n, uint16_t to, const std::vector<uint8_t>& gossip) {
        std::vector<int> slots;
        for (const SimNode& k : nodes_)
            if (k.id == to && k.instance == n.m->owner(to)) slots.push_back(k.slot);
        if (slots.empty() || size() == opt_.nodes) {
            slots.clear();
            for (const SimNode& k : nodes_)
                if (k.id == to) slots.push_back(k.slot);
        }
        for (int s : slots) {
            Frame f;
            f.from = n.id;
            f.to = to;
            f.from_slot = n.slot;
            f.to_slot = s;
            f.ping_sent_us = now_;
            f.from_instance = n.instance;
            f.from_location = n.location;
            f.gossip = gossip;
            send(std::move(f));
        }
    }

    void deliver(const Frame& f) {
        SimNode& n = node(static_cast<uint16_t>(f.to_slot));
        if (n.down || f.to_incarnation != n.incarnation) return;
        if (n.frozen) {
            n.held.push_back(f);
            return;
        }
        n.traffic.frames_received++;
        n.traffic.bytes_received += heartbeat_wire_bytes(f.gossip.size());
        Gossip g;
        if (!decode_gossip(f.gossip.data(), f.gossip.size(), configured_, &g)) {
            report_failure("node " + std::to_string(f.to) + " cannot decode gossip from node " +
                           std::to_string(f.from));
            return;
        }
        // Engine::admit: one instance per node id. The owner's lanes are up
        // while it runs (or is stopped for less than a timeout: then the
        // engine closes them), and no link between the two is cut (a
        // restarted instance took its slot: then they are down).
        if (n.m->owner(f.from) != f.from_instance) {
            std::string why;
            bool lanes_up = false;
            for (const SimNode& k : nodes_)
                lanes_up = lanes_up ||
                           (k.id == f.from && k.instance == n.m->owner(f.from) && !k.down &&
                            !(k.frozen && now_ - k.frozen_at_us >= opt_.peer_timeout_ms * kMs) &&
                            !cut_[k.slot][n.slot] && !cut_[n.slot][k.slot]);
            if (n.m->claim_verdict(f.from, f.from_instance, f.from_location, lanes_up, now_,
                                   &why) == ClaimVerdict::Refuse) {
                refusals_++;
                if (size() > opt_.nodes && refusal_noted_++ < 8)
                    note("node " + std::to_string(n.id) + " (slot " + std::to_string(n.slot) +
                         ") refuses: " + why);
                return;
            }
            if (n.m->owner(f.from) != 0 && size() > opt_.nodes)
                note("node " + std::to_string(n.id) + " (slot " + std::to_string(n.slot) +
                     ") admits instance " + std::to_string(f.from_instance) + " for node " +
                     std::to_string(f.from) + " instead of instance " +
                     std::to_string(n.m->owner(f.from)));
            n.m->set_owner(f.from, f.from_instance, f.from_location);
        }
        n.m->on_heard(f.from, now_);
        if (!f.pong) {
            n.m->on_gossip(f.from, g, now_);
            Frame r;
            r.from = n.id;
            r.to = f.from;
            r.from_slot = n.slot;
            r.to_slot = f.from_slot;
            r.from_location = n.location;
            r.pong = true;
            r.ping_sent_us = f.ping_sent_us;
            r.from_instance = n.instance;
            Gossip mine = n.m->gossip();
            if (n.m->echo_for(f.from, now_)) mine.flags |= kGossipInView;
            r.gossip = encoded(mine);
            send(std::move(r));
        } else {
            n.m->on_gossip(f.from, g, now_);
            n.m->on_echo(f.from, f.ping_sent_us, (g.flags & kGossipInView) != 0, now_);
        }
        membership_tick(n);
    }

    static std::vector<uint8_t> encoded(const Gossip& g) {
        std::vector<uint8_t> b(gossip_size(g));
        encode_gossip(g, b.data());
        return b;
    }

    // Engine::membership_tick: a changed gossip goes to every peer at once.
    void membership_tick(SimNode& n) {
        const bool changed = n.m->tick(now_);
        collect_logs(n);
        if (!changed) return;
        ping_all(n);
    }

    void collect_logs(SimNode& n) {
        for (const std::string& line : n.m->take_logs())
            note("node " + std::to_string(n.id) +
                 (n.slot != n.id ? " (slot " + std::to_string(n.slot) + ")" : std::string()) + " " +
                 line + " [" + member_state_name(n.m->state()) + "]");
    }

    void note(const std::string& what) {
        char t[32];
        snprintf(t, sizeof t, "%9.3f s ", static_cast<double>(now_ - kStartUs) / kSec);
        trace_.push_back(t + what);
        if (trace_.size() > 80) trace_.pop_front();
    }

    SimOptions opt_;
    std::mt19937_64 rng_;
    int64_t now_;
    NodeMask configured_ = 0;
    std::vector<SimNode> nodes_;
    std::vector<std::vector<bool>> cut_;              // cut_[from][to]
    std::vector<std::vector<int64_t>> last_arrival_;  // per link, for FIFO
    std::vector<Event> slots_;
    std::vector<size_t> free_;
    std::priority_queue<Queued, std::vector<Queued>, std::greater<Queued>> queue_;
    uint64_t seq_ = 0;
    SafetyMonitor monitor_;
    std::deque<std::string> trace_;
    uint64_t instances_ = 0;
    int refusal_noted_ = 0;
    int64_t traffic_since_us_ = kStartUs;

  public:
    uint64_t refusals_ = 0;  // frames of an instance refused by claim_verdict
};

}  // namespace pgrac::ic::memsim
